"""Entry point: ``python -m pagedlib.bench NAME [options]`` runs ``pagedlib.bench.NAME.main``."""
import importlib
import sys

NAMES = ("memory", "attention", "kernels", "engine", "gpu_record")


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in NAMES:
        print(f"usage: python -m pagedlib.bench {{{'|'.join(NAMES)}}} [options]\n"
              "  memory     block manager throughput (allocate + free, prefix lookups)\n"
              "  attention  paged-attention kernels: time and bandwidth on a GPU, correctness on a CPU\n"
              "  kernels    --resources: registers, spills, shared memory for sm_75/80/90 (no GPU needed);\n"
              "             on a GPU: decode bandwidth of the chosen launch configuration and its neighbours\n"
              "  engine     serving engine: capacity and tokens/s vs reserve-max and static batching\n"
              "  gpu_record on a GPU: the record chapters 8 and 9 show without one (pagedlib/data)")
        return 2
    module = importlib.import_module(f"pagedlib.bench.{argv[0]}")
    return module.main(argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
