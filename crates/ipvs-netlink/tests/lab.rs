//! Kernel tests of ipvs-netlink, run inside the lab VM.
