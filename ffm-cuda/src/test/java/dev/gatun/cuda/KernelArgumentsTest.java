package dev.gatun.cuda;

import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

class KernelArgumentsTest {
    @Test
    void packsEachValueBehindItsOwnPointer() {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment native8 = arena.allocate(8);
            MemorySegment p = Kernel.pack(arena, 7, 1L << 40, 2.5f, 3.25, (short) -2, (byte) 9, true, native8);
            MemorySegment[] slot = new MemorySegment[8];
            for (int i = 0; i < 8; i++) {
                slot[i] = p.getAtIndex(ValueLayout.ADDRESS, i).reinterpret(8);
            }
            assertThat(slot[0].get(ValueLayout.JAVA_INT, 0)).isEqualTo(7);
            assertThat(slot[1].get(ValueLayout.JAVA_LONG, 0)).isEqualTo(1L << 40);
            assertThat(slot[2].get(ValueLayout.JAVA_FLOAT, 0)).isEqualTo(2.5f);
            assertThat(slot[3].get(ValueLayout.JAVA_DOUBLE, 0)).isEqualTo(3.25);
            assertThat(slot[4].get(ValueLayout.JAVA_SHORT, 0)).isEqualTo((short) -2);
            assertThat(slot[5].get(ValueLayout.JAVA_BYTE, 0)).isEqualTo((byte) 9);
            assertThat(slot[6].get(ValueLayout.JAVA_BYTE, 0)).isEqualTo((byte) 1);
            assertThat(slot[7].get(ValueLayout.JAVA_LONG, 0)).isEqualTo(native8.address());
            // every value in its own, suitably aligned slot
            assertThat(slot[1].address() % 8).isZero();
            assertThat(slot[3].address() % 8).isZero();
        }
    }

    @Test
    void rejectsNullAndUnsupportedArguments() {
        try (Arena arena = Arena.ofConfined()) {
            assertThatThrownBy(() -> Kernel.pack(arena, 1, null)).hasMessageContaining("argument 1 is null");
            assertThatThrownBy(() -> Kernel.pack(arena, "text")).hasMessageContaining("unsupported type java.lang.String");
        }
    }

    @Test
    void bfloat16AndFloat16Conversions() {
        assertThat(Blas.toBFloat16(1.0f)).isEqualTo((short) 0x3F80);
        assertThat(Blas.fromBFloat16(Blas.toBFloat16(3.140625f))).isEqualTo(3.140625f);
        // round to nearest even: 1 + 2^-8 is halfway between two bf16 values, rounds to 1
        assertThat(Blas.fromBFloat16(Blas.toBFloat16(1.00390625f))).isEqualTo(1.0f);
        assertThat(Float.isNaN(Blas.fromBFloat16(Blas.toBFloat16(Float.NaN)))).isTrue();
        assertThat(Blas.toFloat16(new float[] {1.0f, -2.0f})).containsExactly((short) 0x3C00, (short) 0xC000);
    }
}
