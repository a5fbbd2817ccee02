"""``tallow info``: the tallow version, the CPU (threads, BLAS) and the GPU adapter."""

from __future__ import annotations

import json

import tallow as tl


def _info(args) -> int:
    cpu = tl.cpu.info()
    print("tallow", tl.__version__)
    print("cpu:")
    print(f"  processor: {cpu['name']} ({cpu['machine']})")
    print(f"  threads:   {cpu['threads']} (rule: {cpu['threads_rule']}; {cpu['threads_details']})")
    for b in cpu["blas"]:
        print(f"  blas:      {b.get('internal_api')} {b.get('version')} "
              f"({b.get('architecture')}, {b.get('num_threads')} threads)")
    print(f"  numpy:     {cpu['numpy']}")
    if tl.utils.gpu_is_available():
        try:
            info = tl.Device.gpu(0).info()
        except Exception as e:  # an adapter that fails to open is reported, not fatal
            print(f"gpu: unavailable ({e})")
        else:
            print("gpu:0:")
            for key in ("adapter", "backend", "adapter_type", "driver"):
                if key in info:
                    print(f"  {key}: {info[key]}")
            if "features" in info:
                print(f"  features: {', '.join(sorted(info['features']))}")
            if "limits" in info:
                lim = info["limits"]
                keys = ("max-storage-buffer-binding-size", "max-buffer-size",
                        "max-compute-workgroup-storage-size", "max-compute-invocations-per-workgroup")
                print("  limits: " + ", ".join(f"{k}={lim[k]}" for k in keys if k in lim))
            if args.json:
                print(json.dumps(info, indent=2, default=str))
    else:
        print("gpu: no WebGPU adapter found (install mesa-vulkan-drivers for lavapipe)")
    return 0


def add_info_parser(sub) -> None:
    p = sub.add_parser("info", help="devices, adapter, features, threads")
    p.add_argument("--json", action="store_true", help="also print the full GPU info as JSON")
    p.set_defaults(run=_info)
