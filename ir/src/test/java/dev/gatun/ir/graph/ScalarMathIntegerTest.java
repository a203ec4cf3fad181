package dev.gatun.ir.graph;

import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.constraints.LongRange;
import org.junit.jupiter.api.Test;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** {@link ScalarMath#applyLong}: integer ops as Java's long arithmetic computes them, checked against plain Java. */
class ScalarMathIntegerTest {

    @Property(tries = 300)
    void arithmeticWrapsAsJavaLong(@ForAll long a, @ForAll long b) {
        assertThat(ScalarMath.applyLong(PointwiseFn.ADD, a, b, 0)).isEqualTo(a + b);
        assertThat(ScalarMath.applyLong(PointwiseFn.SUB, a, b, 0)).isEqualTo(a - b);
        assertThat(ScalarMath.applyLong(PointwiseFn.MUL, a, b, 0)).isEqualTo(a * b);
        assertThat(ScalarMath.applyLong(PointwiseFn.NEG, a, 0, 0)).isEqualTo(-a);
        assertThat(ScalarMath.applyLong(PointwiseFn.ABS, a, 0, 0)).isEqualTo(a < 0 ? -a : a);
        assertThat(ScalarMath.applyLong(PointwiseFn.MAXIMUM, a, b, 0)).isEqualTo(a >= b ? a : b);
        assertThat(ScalarMath.applyLong(PointwiseFn.MINIMUM, a, b, 0)).isEqualTo(a <= b ? a : b);
        assertThat(ScalarMath.applyLong(PointwiseFn.RELU, a, 0, 0)).isEqualTo(a > 0 ? a : 0);
        assertThat(ScalarMath.applyLong(PointwiseFn.LT, a, b, 0)).isEqualTo(a < b ? 1 : 0);
        assertThat(ScalarMath.applyLong(PointwiseFn.EQ, a, a, 0)).isEqualTo(1);
        assertThat(ScalarMath.applyLong(PointwiseFn.WHERE, 0, a, b)).isEqualTo(b);
    }

    @Property(tries = 300)
    void powIsRepeatedWrappingMultiplication(@ForAll long base, @ForAll @LongRange(min = 0, max = 200) long exp) {
        long want = 1;
        for (long k = 0; k < exp; k++) want *= base;
        assertThat(ScalarMath.pow(base, exp)).isEqualTo(want);
    }

    @Test
    void powOfANegativeExponentIsTheIntegerPartAsPyTorchGivesIt() {
        assertThat(ScalarMath.pow(1, -5)).isEqualTo(1);
        assertThat(ScalarMath.pow(-1, -5)).isEqualTo(-1);
        assertThat(ScalarMath.pow(-1, -4)).isEqualTo(1);
        assertThat(ScalarMath.pow(2, -1)).isZero();
        assertThat(ScalarMath.pow(0, -1)).isZero();
        assertThat(ScalarMath.pow(3, 39)).isEqualTo(4052555153018976267L);   // beyond 2^53: exact
    }

    @Test
    void floatingFunctionsAreRefusedOnIntegers() {
        assertThatThrownBy(() -> ScalarMath.applyLong(PointwiseFn.DIV, 1, 2, 0)).hasMessageContaining("div computes in floating point");
    }
}
