package dev.gatun.runtime;

import dev.gatun.ir.DType;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import org.junit.jupiter.api.Test;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** The conversions every host computation ends with, checked against Java's own casts. */
class DTypesTest {

    @Property(tries = 300)
    void integersWrapAsJavasNarrowingDoes(@ForAll long v) {
        assertThat(DTypes.wrap(v, DType.INT64)).isEqualTo(v);
        assertThat(DTypes.wrap(v, DType.INT32)).isEqualTo((int) v);
        assertThat(DTypes.wrap(v, DType.INT8)).isEqualTo((byte) v);
        assertThat(DTypes.wrap(v, DType.BOOL)).isEqualTo(v != 0 ? 1 : 0);
    }

    @Property(tries = 300)
    void integersBecomeFloatsByOneRounding(@ForAll long v) {
        assertThat(DTypes.fromLong(v, DType.FLOAT64)).isEqualTo((double) v);
        assertThat(DTypes.fromLong(v, DType.FLOAT32)).isEqualTo((double) (float) v);
        assertThat(DTypes.fromLong(v, DType.FLOAT16)).isEqualTo((double) Float.float16ToFloat(Float.floatToFloat16((float) v)));
    }

    @Property(tries = 300)
    void floatsBecomeIntegersTowardZeroSaturatingThenWrapping(@ForAll double v) {
        assertThat(DTypes.toLong(v, DType.INT64)).isEqualTo((long) v);
        assertThat(DTypes.toLong(v, DType.INT32)).isEqualTo((int) (long) v);
        assertThat(DTypes.toLong(v, DType.INT8)).isEqualTo((byte) (long) v);
        assertThat(DTypes.toLong(v, DType.BOOL)).isEqualTo(v != 0 || Double.isNaN(v) ? 1 : 0);
    }

    @Test
    void theEdgesOfTheRangeAndNaN() {
        assertThat(DTypes.toLong(Double.NaN, DType.INT64)).isZero();
        assertThat(DTypes.toLong(1e19, DType.INT64)).isEqualTo(Long.MAX_VALUE);
        assertThat(DTypes.toLong(-1e19, DType.INT32)).isEqualTo((int) Long.MIN_VALUE);
        assertThat(DTypes.toLong(3e9, DType.INT32)).isEqualTo(-1294967296L);
        assertThat(DTypes.fromLong((1L << 60) + (1L << 36) + 1, DType.FLOAT32)).isEqualTo(0x1.000002p60);   // not 2^60, as via a double
        assertThatThrownBy(() -> DTypes.fromLong(1, DType.INT64)).hasMessageContaining("not a floating dtype");
        assertThatThrownBy(() -> DTypes.toLong(1, DType.FLOAT32)).hasMessageContaining("not an integer dtype");
    }
}
