package dev.gatun.cuda.backend;

import dev.gatun.cuda.Device;
import dev.gatun.cuda.DeviceBuffer;
import dev.gatun.cuda.IpcMemHandle;
import dev.gatun.planner.Plan;
import dev.gatun.planner.Pool;
import dev.gatun.runtime.dist.Rendezvous;

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
    private final Rendezvous rendezvous;
    private final String prefix;
    private final Map<String, Group> groups = new LinkedHashMap<>();
    private final Map<String, SymPool> pools = new LinkedHashMap<>();
    private final List<DeviceBuffer> opened = new ArrayList<>(), owned = new ArrayList<>();
    /** GPUs of peer threads of this process, retained while their memory is mapped. */
    private final Map<Integer, Device> peers = new java.util.HashMap<>();
    private static final long PID = ProcessHandle.current().pid();

    SymmetricHeap(Device device, Rendezvous rendezvous, String prefix) {
        this.device = device;
        this.rendezvous = rendezvous;
        this.prefix = prefix;
    }

    /** Sets up pads for {@code groups} and opens every symmetric pool of the plan; every rank calls it alike. */
    void open(Plan plan, Map<String, List<Integer>> groupMembers, List<String> barrierGroups, Map<String, DeviceBuffer> localPools,
              Duration timeout) {
        var needed = new java.util.TreeSet<>(barrierGroups);
        for (Pool p : plan.pools()) if (p.isSymmetric()) needed.add(p.group());
        int rank = rendezvous.rank();
        var pads = new LinkedHashMap<String, DeviceBuffer>();
        for (String g : needed) {
            List<Integer> members = groupMembers.get(g);
            if (!members.contains(rank)) continue;
            DeviceBuffer pad = own(device.allocate(4L * SymmetricKernels.MAX_BLOCKS * members.size()));
            DeviceBuffer epochs = own(device.allocate(4L * SymmetricKernels.MAX_BLOCKS));
            pad.memset(0);
            epochs.memset(0);
            pads.put(g, pad);
            groups.put(g, new Group(g, members, members.indexOf(rank), null, epochs));
        }
        device.synchronize();
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
            long[] addresses = exchange("pool/" + p.name(), mine, members, Math.max(1, p.allocationBytes()), timeout);
            if (mine != null) pools.put(p.name(), new SymPool(p.name(), groups.get(p.group()), table(addresses)));
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
            if (pid == PID) {
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

    private DeviceBuffer table(long[] addresses) {
        DeviceBuffer t = own(device.allocate(8L * addresses.length));
        t.copyFrom(MemorySegment.ofArray(addresses));
        return t;
    }

    private DeviceBuffer own(DeviceBuffer b) {
        owned.add(b);
        return b;
    }

    /** Device synchronised, peers' mappings closed, every rank past that point, then local memory freed. */
    @Override public void close() {
        try {
            device.synchronize();
        } catch (RuntimeException ignored) {
            // a sticky device error: still release what we can
        }
        for (DeviceBuffer b : opened) b.close();
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
