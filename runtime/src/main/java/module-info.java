/** Sessions, host tensors, the backend SPI, the host backend and the reference interpreter. */
module dev.gatun.runtime {
    requires transitive dev.gatun.lowering;
    requires transitive dev.gatun.planner;

    exports dev.gatun.runtime;
    exports dev.gatun.runtime.spi;
    exports dev.gatun.runtime.reference;
    exports dev.gatun.runtime.distributed;

    uses dev.gatun.runtime.spi.Backend;
    provides dev.gatun.runtime.spi.Backend with dev.gatun.runtime.host.HostBackend;
}
