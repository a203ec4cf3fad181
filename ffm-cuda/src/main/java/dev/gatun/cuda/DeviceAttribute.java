package dev.gatun.cuda;

import dev.gatun.cuda.ffi.driver.driver;

/** Commonly used device attributes ({@code CUdevice_attribute}); {@link Device#attribute(int)} takes any other. */
public enum DeviceAttribute {
    COMPUTE_CAPABILITY_MAJOR(driver.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR()),
    COMPUTE_CAPABILITY_MINOR(driver.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR()),
    MULTIPROCESSOR_COUNT(driver.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT()),
    MAX_THREADS_PER_BLOCK(driver.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK()),
    MAX_SHARED_MEMORY_PER_BLOCK_OPTIN(driver.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN()),
    WARP_SIZE(driver.CU_DEVICE_ATTRIBUTE_WARP_SIZE()),
    L2_CACHE_SIZE(driver.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE()),
    UNIFIED_ADDRESSING(driver.CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING()),
    VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED(driver.CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED()),
    HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED(driver.CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED()),
    MULTICAST_SUPPORTED(driver.CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED()),
    IPC_EVENT_SUPPORTED(driver.CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED()),
    PCI_BUS_ID(driver.CU_DEVICE_ATTRIBUTE_PCI_BUS_ID()),
    CLOCK_RATE(driver.CU_DEVICE_ATTRIBUTE_CLOCK_RATE()),
    /** 1 when contexts on this device are served by the Multi-Process Service (kernels of several processes run at once). */
    MPS_ENABLED(driver.CU_DEVICE_ATTRIBUTE_MPS_ENABLED());

    private final int code;

    DeviceAttribute(int code) {
        this.code = code;
    }

    /** The {@code CU_DEVICE_ATTRIBUTE_*} value. */
    public int code() { return code; }
}
