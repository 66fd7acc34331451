#!/bin/sh
# Reproduces the kernel lock cycle that hung a lab run (see README, "Privileges"): IPVS loads a
# missing scheduler module (request_module) while it holds its global mutex; ip_vs_lblc's init
# registers per-namespace state, which waits for the namespace teardown in progress; that
# teardown waits for IPVS's mutex. Not a test: it hangs the VM's kernel for good. Run it with
#
#   cargo run -p lab -- run --timeout 400 -- tests/lab/repro/ipvs-module-deadlock.sh
#
# and read: "HUNG" and the three stacks (ipvsadm in __request_module under ip_vs_add_service,
# the netns cleanup worker in ip_vs_service_nets_cleanup, modprobe in register_pernet_subsys).
# With ip_vs_lblc loaded first (comment out the modprobe -r), the same steps finish at once.
# shellcheck disable=SC2016 # the inner scripts expand in the namespace's shell
modprobe -r ip_vs_lblc 2>/dev/null
ip netns add big
# A namespace slow to tear down: 8,000 virtual servers and 6,000 addresses on a dummy link.
ip netns exec big sh -c 'i=0; while [ $i -lt 8000 ]; do
    v="10.$((i/62500)).$((i/250%250)).$((i%250+1)):80"
    echo "-A -t $v -s rr"; echo "-a -t $v -r 10.244.0.2:8080 -m"; i=$((i+1)); done | ipvsadm -R 2>/dev/null'
ip netns exec big ip link add d0 type dummy
ip netns exec big sh -c 'i=0; while [ $i -lt 6000 ]; do
    echo "addr add 10.$((i/62500+100)).$((i/250%250)).$((i%250+1))/32 dev d0"; i=$((i+1)); done > /tmp/a.batch
    ip -batch /tmp/a.batch'
ip netns add other
ip netns del big
ip netns exec other ipvsadm -A -t 10.96.0.1:80 -s lblc &
pid=$!
i=0
while [ $i -lt 200 ] && kill -0 $pid 2>/dev/null; do sleep 1; i=$((i+1)); done
if kill -0 $pid 2>/dev/null; then echo "HUNG: ipvsadm -s lblc still blocked after $i s"; else echo "done after $i s"; fi
cat /proc/$pid/stack 2>/dev/null | head -5
# busybox has no pgrep
# shellcheck disable=SC2009
for p in $(ps | grep -E 'modprobe|kworker' | awk '{print $1}'); do
    s=$(head -3 "/proc/$p/stack" 2>/dev/null | tr '\n' ' ')
    [ -n "$s" ] && echo "$p: $s"
done | grep -E "register_pernet|ip_vs" | head
