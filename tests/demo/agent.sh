#!/bin/sh
# Runs inside the lab VM: three web pods and an outside client, the agent programs the node
# from the manifests, then real requests through ClusterIPs and the NodePort.
#   agent.sh AGENT_BINARY MANIFEST_DIR
set -e
agent=$1
manifests=$2
sysctl -qw net.ipv4.ip_forward=1
# As on any kubeadm node: bridged pod traffic goes through netfilter (pod -> VIP -> other pod).
modprobe br_netfilter && sysctl -qw net.bridge.bridge-nf-call-iptables=1
ip link add cni0 type bridge && ip addr add 10.244.0.1/24 dev cni0 && ip link set cni0 up
for i in 1 2 3; do
    ip netns add web-$i
    ip link add vweb$i type veth peer name eth0 netns web-$i
    ip link set vweb$i master cni0 up
    # What the CNI bridge plugin does with hairpinMode: a pod can reach itself through the bridge.
    bridge link set dev vweb$i hairpin on
    ip -n web-$i link set lo up
    ip -n web-$i addr add 10.244.0.$((i + 1))/24 dev eth0 && ip -n web-$i link set eth0 up
    ip -n web-$i route add default via 10.244.0.1
    mkdir -p /tmp/www$i && echo "hello from web-$i" >/tmp/www$i/index.html
    ip netns exec web-$i busybox httpd -p 8080 -h /tmp/www$i
done
# The node's own address faces an outside client.
ip netns add outside
ip link add eth0 type veth peer name eth0 netns outside
ip addr add 192.168.100.1/24 dev eth0 && ip link set eth0 up
ip -n outside link set lo up
ip -n outside addr add 192.168.100.2/24 dev eth0 && ip -n outside link set eth0 up
ip -n outside route add default via 192.168.100.1
# Someone else's IPVS service (keepalived, say): the agent must leave it alone.
ipvsadm -A -t 192.0.2.50:80 -s wlc

get() { timeout 5 ip netns exec "$1" wget -qO- "$2" 2>&1 || echo "(no answer)"; }

echo "--- kube-proxy-ipvs --once --manifests $(basename "$manifests")"
"$agent" --manifests "$manifests" --hostname-override node-a --cluster-cidr 10.244.0.0/16 --once
echo
echo "--- ipvsadm -ln"
ipvsadm -ln
echo
echo "--- ip addr show kube-ipvs0"
ip -br addr show kube-ipvs0
echo
echo "--- ClusterIP 10.96.0.10 (rr), from the outside client"
for _ in 1 2 3 4; do get outside http://10.96.0.10/; done
echo "--- NodePort 192.168.100.1:30080, from the outside client"
for _ in 1 2 3; do get outside http://192.168.100.1:30080/; done
echo "--- ClientIP affinity, 10.96.0.11"
for _ in 1 2 3; do get outside http://10.96.0.11/; done
echo "--- sh scheduler, 10.96.0.12"
for _ in 1 2 3; do get outside http://10.96.0.12/; done
echo "--- from a pod to its own Service (hairpin)"
for _ in 1 2 3; do get web-1 http://10.96.0.10/; done
echo
echo "--- kube-proxy-ipvs --cleanup: ours goes, the foreign service stays"
"$agent" --hostname-override node-a --cleanup
ipvsadm -Sn
