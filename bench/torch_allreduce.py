"""PyTorch peers for Gatun's all-reduce benchmark: run with torchrun on the same machine, in the same command.

    torchrun --nproc_per_node N bench/torch_allreduce.py [iterations] [dtype]

Per shape: torch.distributed.all_reduce over NCCL, and torch.ops.symm_mem.one_shot_all_reduce eagerly and
captured in a torch.cuda.CUDAGraph. Each cell is the median host wall time per call (enqueue to completion)
over the timed calls after 50 warm-ups. Every result is checked against the exact sum; a failure is printed
in the table as FAILED(reason) rather than hidden. Multicast stays off (TORCH_SYMM_MEM_DISABLE_MULTICAST=1).
"""
import os
import sys
import time

import torch
import torch.distributed as dist

ITERS = int(sys.argv[1]) if len(sys.argv) > 1 else 200
DTYPE = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[sys.argv[2] if len(sys.argv) > 2 else "f32"]
SIDES = [8, 64, 256, 512, 1024, 4096]


def median_us(fn):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(ITERS):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e6)
    times.sort()
    return times[len(times) // 2]


def check(out, want):
    tol = 1e-5 if DTYPE == torch.float32 else 2e-2
    err = (out.double() - want).abs().max().item() / max(1.0, want.abs().max().item())
    if err > tol:
        raise RuntimeError(f"wrong result, relative error {err:.2e}")


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dev = torch.device("cuda")
    group = dist.group.WORLD
    try:
        import torch.distributed._symmetric_memory as symm_mem
        if hasattr(symm_mem, "enable_symm_mem_for_group"):
            symm_mem.enable_symm_mem_for_group(group.group_name)
    except Exception as e:  # recorded, not hidden
        symm_mem = None
        symm_error = f"{type(e).__name__}: {e}"
    if rank == 0:
        print(f"torch {torch.__version__}, {world} ranks, {torch.cuda.get_device_name()}, {DTYPE}, median of {ITERS} calls (us, wall)")
        print(f"{'shape':<10} {'bytes':>10} | {'nccl':>10} | {'symm 1shot':>12} | {'1shot graph':>12}")
    for side in SIDES:
        n = side * side
        gen = torch.Generator(device="cpu").manual_seed(1)
        base = [torch.randn(n, generator=gen) for _ in range(world)]
        want = torch.stack([b.double() for b in base]).sum(0).to(dev)
        x = base[rank].to(dev, DTYPE)
        cells = []
        # NCCL: all_reduce is in place, so each call reduces a fresh copy of x
        try:
            buf = x.clone()

            def nccl():
                buf.copy_(x)
                dist.all_reduce(buf)
            cells.append(f"{median_us(nccl):10.1f}")
            nccl()
            torch.cuda.synchronize()
            check(buf, want)
        except Exception as e:
            cells.append(f"FAILED({type(e).__name__})")
        # symmetric memory one-shot, eager and under graph replay
        if symm_mem is None:
            cells += [f"FAILED({symm_error[:20]})"] * 2
        else:
            try:
                t = symm_mem.empty(n, dtype=DTYPE, device=dev)
                symm_mem.rendezvous(t, group.group_name)
                t.copy_(x)

                def one_shot():
                    return torch.ops.symm_mem.one_shot_all_reduce(t, "sum", group.group_name)
                cells.append(f"{median_us(one_shot):12.1f}")
                check(one_shot(), want)
                try:
                    g = torch.cuda.CUDAGraph()
                    s = torch.cuda.Stream()
                    s.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(s):
                        for _ in range(3):
                            one_shot()
                    torch.cuda.current_stream().wait_stream(s)
                    with torch.cuda.graph(g):
                        out = one_shot()
                    cells.append(f"{median_us(g.replay):12.1f}")
                    g.replay()
                    torch.cuda.synchronize()
                    check(out, want)
                except Exception as e:
                    cells.append(f"FAILED({type(e).__name__})")
            except Exception as e:
                cells += [f"FAILED({type(e).__name__}: {str(e)[:40]})"] * 2
        if rank == 0:
            print(f"{str(side) + 'x' + str(side):<10} {n * x.element_size():>10} | " + " | ".join(cells), flush=True)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
