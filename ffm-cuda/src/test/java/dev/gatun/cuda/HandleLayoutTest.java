package dev.gatun.cuda;

import dev.gatun.cuda.ffi.cudart.cudaIpcEventHandle_st;
import dev.gatun.cuda.ffi.cudart.cudaIpcMemHandle_st;
import dev.gatun.cuda.ffi.driver.CUipcMemHandle_st;
import dev.gatun.cuda.ffi.driver.CUmemAccessDesc_st;
import dev.gatun.cuda.ffi.driver.CUmemAllocationProp_st;
import dev.gatun.cuda.ffi.nccl.ncclUniqueId;
import org.junit.jupiter.api.Test;

import java.util.Arrays;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

class HandleLayoutTest {
    @Test
    void nativeHandleSizesMatchTheHeaders() {
        assertThat(cudaIpcMemHandle_st.layout().byteSize()).isEqualTo(64);
        assertThat(cudaIpcEventHandle_st.layout().byteSize()).isEqualTo(64);
        assertThat(CUipcMemHandle_st.layout().byteSize()).isEqualTo(64);
        assertThat(ncclUniqueId.layout().byteSize()).isEqualTo(128);
        assertThat(IpcMemHandle.SIZE).isEqualTo(cudaIpcMemHandle_st.layout().byteSize());
        assertThat(IpcEventHandle.SIZE).isEqualTo(cudaIpcEventHandle_st.layout().byteSize());
        assertThat(NcclUniqueId.SIZE).isEqualTo(ncclUniqueId.layout().byteSize());
        // VMM structs as cuda.h lays them out on LP64
        assertThat(CUmemAllocationProp_st.layout().byteSize()).isEqualTo(32);
        assertThat(CUmemAccessDesc_st.layout().byteSize()).isEqualTo(12);
    }

    @Test
    void ipcHandleIsAnImmutableValue() {
        byte[] bytes = new byte[64];
        for (int i = 0; i < bytes.length; i++) {
            bytes[i] = (byte) (i * 7);
        }
        IpcMemHandle h = IpcMemHandle.of(bytes);
        bytes[0] = 99; // the handle copied its input
        assertThat(h.bytes()[0]).isEqualTo((byte) 0);
        byte[] out = h.bytes();
        out[1] = 42; // and hands out copies
        assertThat(h.bytes()[1]).isEqualTo((byte) 7);
        assertThat(IpcMemHandle.fromHex(h.toHex())).isEqualTo(h).hasSameHashCodeAs(h);
        assertThat(IpcMemHandle.of(new byte[64])).isNotEqualTo(h);
        assertThatThrownBy(() -> IpcMemHandle.of(new byte[63])).isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("64");
        assertThatThrownBy(() -> IpcEventHandle.of(new byte[65])).isInstanceOf(IllegalArgumentException.class);
    }

    @Test
    void ncclUniqueIdIsA128ByteValue() {
        byte[] bytes = new byte[128];
        Arrays.fill(bytes, (byte) 5);
        NcclUniqueId id = NcclUniqueId.of(bytes);
        assertThat(id.bytes()).hasSize(128).containsOnly((byte) 5);
        assertThat(NcclUniqueId.fromHex(id.toHex())).isEqualTo(id);
        assertThat(id.toHex()).hasSize(256);
        assertThatThrownBy(() -> NcclUniqueId.of(new byte[64])).isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("128");
    }
}
