"""A command run under a profiler: under nsys, its flags, windows and exports (nsys_runner); with
torch.profiler started inside it (torch_runner); its output relayed as it comes (relay)."""
