/**
 * Processes and rendezvous for multi-GPU runs: one JVM per GPU started by {@link dev.gatun.runtime.distributed.Launcher}
 * ({@code gatun-run}), or several ranks as threads of one JVM ({@link dev.gatun.runtime.distributed.LocalWorld}).
 *
 * <h2>Environment of a rank</h2>
 * <ul>
 *   <li>{@code RANK}, {@code LOCAL_RANK}, {@code WORLD_SIZE} (and {@code LOCAL_WORLD_SIZE}): who this rank is.</li>
 *   <li>{@code GATUN_RENDEZVOUS=host:port}: the {@link dev.gatun.runtime.distributed.RendezvousStore}.</li>
 *   <li>{@code GATUN_SECRET}: the shared secret every connection proves it knows (HMAC-SHA256 challenge-response,
 *       both directions). gatun-run generates a random one per launch.</li>
 *   <li>{@code GATUN_RENDEZVOUS_SERVER}: {@code launcher} when gatun-run hosts the store (it does, in its own JVM, on
 *       127.0.0.1 at a free port); absent or {@code rank0} when ranks are started by hand: rank 0 then hosts the
 *       store at {@code GATUN_RENDEZVOUS}.</li>
 *   <li>{@code GATUN_RENDEZVOUS_TIMEOUT} (seconds, optional): the default timeout of waits and of connecting.</li>
 * </ul>
 * Everything else in the launcher's environment (NCCL_NVLS_ENABLE, TORCH_SYMM_MEM_DISABLE_MULTICAST,
 * NVSHMEM_DISABLE_NVLS, CUDA_VISIBLE_DEVICES, ...) reaches the ranks unchanged.
 *
 * <h2>Rendezvous</h2>
 * {@link dev.gatun.runtime.distributed.Rendezvous} offers set / blocking get / atomic add / barrier / allGather; every wait
 * has a timeout whose message names the ranks that never arrived, and a wait for a rank whose connection dropped
 * fails at once naming it. Ranks exchange plan fingerprints with {@link dev.gatun.runtime.distributed.Fingerprints#check}
 * and refuse to run different plans.
 *
 * <h2>Without a GPU</h2>
 * The host backend runs a rank of either kind too: its collectives go to the other ranks through shared memory on
 * one host, else TCP (each connection proving the secret with {@link dev.gatun.runtime.distributed.Rendezvous#mac}),
 * {@code GATUN_HOST_TRANSPORT=shm|tcp|auto} forcing one.
 */
package dev.gatun.runtime.distributed;
