package dev.gatun.runtime.cuda;

import dev.gatun.cuda.Device;
import dev.gatun.cuda.DeviceBuffer;
import dev.gatun.cuda.FileDescriptors;
import dev.gatun.cuda.IpcMemHandle;
import dev.gatun.cuda.PhysicalMemory;
import dev.gatun.cuda.VirtualRange;
import dev.gatun.planner.Plan;
import dev.gatun.planner.Pool;
import dev.gatun.runtime.distributed.Rendezvous;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The symmetric side of one rank's plan: for every symmetric pool, the peers' allocations opened through CUDA
 * IPC and a device table of their base addresses; for every group, a signal pad (zeroed, and every rank
 * synchronised, before any handle is exchanged), the peers' pads and the block epochs. Infrastructure memory
 * is plain cudaMalloc, outside any pool a capture redirects. Closing unmaps peers before local memory goes.
 */
final class SymmetricHeap implements AutoCloseable {
    /** A group's barrier state on this rank. */
    record Group(String name, List<Integer> members, int groupRank, DeviceBuffer padTable, DeviceBuffer epochs) {}

    /** A symmetric pool: {@code peerTable} holds every member's base address, in group-rank order. */
    record SymPool(String name, Group group, DeviceBuffer peerTable) {}

    private final Device device;
    /** The rank's own stream: other ranks may share this GPU (and its context), so nothing here waits on the whole device. */
    private final dev.gatun.cuda.Stream stream;
    private final Rendezvous rendezvous;
    private final String prefix;
    private final Map<String, Group> groups = new LinkedHashMap<>();
    private final Map<String, SymPool> pools = new LinkedHashMap<>();
    private final List<DeviceBuffer> opened = new ArrayList<>(), owned = new ArrayList<>();
    /** GPUs of peer threads of this process, retained while their memory is mapped. */
    private final Map<Integer, Device> peers = new java.util.HashMap<>();
    private static final long PID = ProcessHandle.current().pid();

    /** An exportable VMM allocation mapped on its own device: cuMemCreate, reserve, map, set access. */
    record VmmBuffer(PhysicalMemory memory, VirtualRange range, DeviceBuffer view) {}

    static VmmBuffer allocateVmm(Device device, long bytes) {
        long size = PhysicalMemory.roundUp(Math.max(1, bytes), PhysicalMemory.granularity(device, false));
        PhysicalMemory mem = PhysicalMemory.create(device, size);
        VirtualRange range = VirtualRange.reserve(device, size);
        range.map(0, mem);
        range.setAccess(0, size, device);
        return new VmmBuffer(mem, range, range.buffer(0, size));
    }

    private final List<AutoCloseable> imported = new ArrayList<>();
    private final List<Integer> exportedFds = new ArrayList<>();

    SymmetricHeap(Device device, dev.gatun.cuda.Stream stream, Rendezvous rendezvous, String prefix) {
        this.device = device;
        this.stream = stream;
        this.rendezvous = rendezvous;
        this.prefix = prefix;
    }

    /** Sets up pads for {@code groups} and opens every symmetric pool of the plan; every rank calls it alike. */
    void open(Plan plan, Map<String, List<Integer>> groupMembers, List<String> barrierGroups, Map<String, DeviceBuffer> localPools,
              Map<String, VmmBuffer> vmmPools, Duration timeout) {
        var needed = new java.util.TreeSet<>(barrierGroups);
        for (Pool p : plan.pools()) if (p.isSymmetric()) needed.add(p.group());
        int rank = rendezvous.rank();
        var pads = new LinkedHashMap<String, DeviceBuffer>();
        for (String g : needed) {
            List<Integer> members = groupMembers.get(g);
            if (!members.contains(rank)) continue;
            DeviceBuffer pad = own(device.allocate(4L * SymmetricKernels.MAX_BLOCKS * members.size()));
            DeviceBuffer epochs = own(device.allocate(4L * SymmetricKernels.MAX_BLOCKS));
            pad.memsetAsync(0, stream);
            epochs.memsetAsync(0, stream);
            pads.put(g, pad);
            groups.put(g, new Group(g, members, members.indexOf(rank), null, epochs));
        }
        stream.synchronize();
        // no peer may signal into a pad before its owner zeroed it
        rendezvous.barrier(prefix + "/pads-zeroed", timeout);
        for (String g : needed) {
            List<Integer> members = groupMembers.get(g);
            DeviceBuffer mine = pads.get(g);
            long[] addresses = exchange("pad/" + g, mine, members, 4L * SymmetricKernels.MAX_BLOCKS * members.size(), timeout);
            if (mine == null) continue;
            Group old = groups.get(g);
            groups.put(g, new Group(g, members, old.groupRank(), table(addresses), old.epochs()));
        }
        for (Pool p : plan.pools()) {
            if (!p.isSymmetric()) continue;
            List<Integer> members = groupMembers.get(p.group());
            DeviceBuffer mine = members.contains(rank) ? localPools.get(p.name()) : null;
            VmmBuffer v = vmmPools.get(p.name());
            long[] addresses = v != null ? exchangeVmm("pool/" + p.name(), mine == null ? null : v, members, timeout)
                    : exchange("pool/" + p.name(), mine, members, Math.max(1, p.allocationBytes()), timeout);
            if (mine != null) pools.put(p.name(), new SymPool(p.name(), groups.get(p.group()), table(addresses)));
        }
        if (!exportedFds.isEmpty() || !vmmPools.isEmpty()) {
            // every peer has taken its copies of our descriptors; ours can go
            rendezvous.barrier(prefix + "/fds-taken", timeout);
            for (int fd : exportedFds) FileDescriptors.close(fd);
            exportedFds.clear();
        }
    }

    Group group(String name) { return groups.get(name); }

    SymPool pool(String name) { return pools.get(name); }

    /**
     * All-gathers (IPC handle, process id, address, GPU) over the world; members map their peers' buffers: through
     * CUDA IPC from another process, or directly with peer access when the peer is a thread of this process
     * (CUDA cannot open its own process's IPC handles). Returns base addresses by group rank.
     */
    private long[] exchange(String what, DeviceBuffer mine, List<Integer> members, long bytes, Duration timeout) {
        var out = java.nio.ByteBuffer.allocate(mine == null ? 0 : IpcMemHandle.SIZE + 20);
        if (mine != null) out.put(mine.ipcHandle().bytes()).putLong(PID).putLong(mine.address()).putInt(device.ordinal());
        List<byte[]> all = rendezvous.allGather(prefix + "/" + what, out.array(), timeout);
        if (mine == null) return null;
        long[] addresses = new long[members.size()];
        for (int i = 0; i < members.size(); i++) {
            int r = members.get(i);
            if (r == rendezvous.rank()) { addresses[i] = mine.address(); continue; }
            var in = java.nio.ByteBuffer.wrap(all.get(r));
            byte[] handle = new byte[IpcMemHandle.SIZE];
            in.get(handle);
            long pid = in.getLong(), address = in.getLong();
            int ordinal = in.getInt();
            if (pid == PID && ordinal == device.ordinal()) {
                // a rank thread sharing this GPU (ranksPerGpu > 1): one context, its memory is ours to address
                addresses[i] = address;
            } else if (pid == PID) {
                Device peer = peers.computeIfAbsent(ordinal, Device::open);
                device.enablePeerAccess(peer);
                device.makeCurrent();
                addresses[i] = address;
            } else {
                DeviceBuffer peer = device.openIpcBuffer(IpcMemHandle.of(handle), bytes);
                opened.add(peer);
                addresses[i] = peer.address();
            }
        }
        return addresses;
    }

    /**
     * The VMM variant: all-gathers (process id, exported file descriptor, size); peers take the descriptor with
     * pidfd_getfd, import it, and map it into a range of their own.
     */
    private long[] exchangeVmm(String what, VmmBuffer mine, List<Integer> members, Duration timeout) {
        var out = java.nio.ByteBuffer.allocate(mine == null ? 0 : 20);
        if (mine != null) {
            int fd = mine.memory().exportFileDescriptor();
            exportedFds.add(fd);
            out.putLong(PID).putInt(fd).putLong(mine.memory().size());
        }
        List<byte[]> all = rendezvous.allGather(prefix + "/" + what, out.array(), timeout);
        if (mine == null) return null;
        long[] addresses = new long[members.size()];
        for (int i = 0; i < members.size(); i++) {
            int r = members.get(i);
            if (r == rendezvous.rank()) { addresses[i] = mine.view().address(); continue; }
            var in = java.nio.ByteBuffer.wrap(all.get(r));
            long pid = in.getLong();
            int fd = in.getInt();
            long size = in.getLong();
            if (pid == PID) throw new IllegalStateException("VMM exchange between threads of one process is not supported; use IPC handles");
            int local = FileDescriptors.takeFrom(pid, fd);
            PhysicalMemory mem;
            try {
                mem = PhysicalMemory.importFileDescriptor(device, local, size);
            } finally {
                FileDescriptors.close(local);
            }
            VirtualRange range = VirtualRange.reserve(device, size);
            range.map(0, mem);
            range.setAccess(0, size, device);
            imported.add(range);
            imported.add(mem);
            addresses[i] = range.address();
        }
        return addresses;
    }

    private DeviceBuffer table(long[] addresses) {
        DeviceBuffer t = own(device.allocate(8L * addresses.length));
        t.copyFrom(MemorySegment.ofArray(addresses)); // legacy stream: waits for no rank's non-blocking stream
        return t;
    }

    private DeviceBuffer own(DeviceBuffer b) {
        owned.add(b);
        return b;
    }

    /** Device synchronised, peers' mappings closed, every rank past that point, then local memory freed. */
    @Override public void close() {
        try {
            stream.synchronize();
        } catch (RuntimeException ignored) {
            // a sticky device error: still release what we can
        }
        for (DeviceBuffer b : opened) b.close();
        for (AutoCloseable c : imported) {
            try {
                c.close();
            } catch (Exception ignored) {
                // keep unmapping the rest
            }
        }
        try {
            rendezvous.barrier(prefix + "/unmapped", Duration.ofSeconds(30));
        } catch (RuntimeException ignored) {
            // a peer that died cannot read our memory any more either
        }
        for (DeviceBuffer b : owned) b.close();
        device.makeCurrent();
        for (Device d : peers.values()) d.close();
    }

}
