#!/bin/sh
# Runs inside the lab VM: two pods behind an IPVS rr service on a VIP held by kube-ipvs0, set
# up by hand with the real tools, then requests from a client namespace. (The agent's own demo
# replaces these hand-made steps once the agent exists.)
set -e
sysctl -qw net.ipv4.ip_forward=1
ip link add cni0 type bridge && ip addr add 10.244.0.1/24 dev cni0 && ip link set cni0 up
for i in 1 2; do
    ip netns add pod$i
    ip link add veth$i type veth peer name eth0 netns pod$i
    ip link set veth$i master cni0 up
    ip -n pod$i link set lo up
    ip -n pod$i addr add 10.244.0.$((i + 1))/24 dev eth0 && ip -n pod$i link set eth0 up
    ip -n pod$i route add default via 10.244.0.1
    mkdir -p /tmp/www$i && echo "hello from pod$i" >/tmp/www$i/index.html
    ip netns exec pod$i busybox httpd -p 8080 -h /tmp/www$i
done
ip netns add client
ip link add vclient type veth peer name eth0 netns client
ip addr add 192.168.100.1/24 dev vclient && ip link set vclient up
ip -n client link set lo up
ip -n client addr add 192.168.100.2/24 dev eth0 && ip -n client link set eth0 up
ip -n client route add default via 192.168.100.1

ip link add kube-ipvs0 type dummy
ip addr add 10.96.0.10/32 dev kube-ipvs0
ipvsadm -A -t 10.96.0.10:80 -s rr
ipvsadm -a -t 10.96.0.10:80 -r 10.244.0.2:8080 -m -w 1
ipvsadm -a -t 10.96.0.10:80 -r 10.244.0.3:8080 -m -w 1

echo "--- ip addr show kube-ipvs0"
ip -br addr show kube-ipvs0
echo "--- ipvsadm -ln"
ipvsadm -ln
echo "--- 4 requests from the client namespace to http://10.96.0.10/"
for _ in 1 2 3 4; do
    timeout 5 ip netns exec client wget -qO- http://10.96.0.10/
done
