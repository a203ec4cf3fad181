package dev.gatun.cuda;

/**
 * The driver calls that multicast objects make, behind an interface so that tests substitute a fake and never touch
 * a real {@code cuMulticast*} function. Package-private: only {@link Multicast} uses it.
 */
interface MulticastDriver {
    long granularity(long size, int numDevices, boolean recommended);

    /** {@code cuMulticastCreate}: returns the multicast handle. */
    long create(long size, int numDevices);

    void addDevice(long mcHandle, int deviceOrdinal);

    void bindMemory(long mcHandle, long mcOffset, long memHandle, long memOffset, long size);

    void unbind(long mcHandle, int deviceOrdinal, long mcOffset, long size);

    /** {@code cuMemRelease} of the multicast handle. */
    void release(long mcHandle);
}
