# How the plugin treats MIG devices; here, not in driver.py, so its launchers name them without loading NVML and gRPC
MIG_DYNAMIC = "dynamic"  # a MIG device missing from NVML is created at its placement
MIG_STATIC = "static"  # MIG devices must already exist; a missing one is an error
