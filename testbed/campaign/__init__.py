"""The fault campaign: kill control-plane and driver components at random while generated workloads run,
restart each as its supervisor would, and check that nothing is lost, leaked or double-allocated."""
