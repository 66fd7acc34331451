#!/bin/bash
# The lab cluster's credentials, made with openssl: a CA, the API server's serving
# certificate, client certificates for each component and node (the names Kubernetes'
# authorizers expect: system:kube-controller-manager, system:node:NAME in system:nodes, ...)
# and the ServiceAccount signing key, with a kubeconfig per client.
#
#   pki.sh DIR API_IP NODE_NAME...
set -euo pipefail
dir=$1 api_ip=$2
shift 2
mkdir -p "$dir"
cd "$dir"
server="https://$api_ip:6443"

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.key" 2>/dev/null; }

# sign NAME SUBJECT [SAN]: a certificate for NAME.key signed by the CA.
sign() {
    local name=$1 subject=$2 san=${3:-} ext
    key "$name"
    openssl req -new -key "$name.key" -subj "$subject" -out "$name.csr" 2>/dev/null
    ext=$(mktemp)
    if [[ -n "$san" ]]; then
        printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$san" >"$ext"
    else
        printf 'extendedKeyUsage=clientAuth\n' >"$ext"
    fi
    openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
        -extfile "$ext" -out "$name.crt" 2>/dev/null
    rm -f "$name.csr" "$ext"
}

# kubeconfig NAME: NAME.kubeconfig with NAME's certificate, embedded.
kubeconfig() {
    local name=$1
    cat >"$name.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: lab
  cluster:
    server: $server
    certificate-authority-data: $(base64 -w0 ca.crt)
users:
- name: $name
  user:
    client-certificate-data: $(base64 -w0 "$name.crt")
    client-key-data: $(base64 -w0 "$name.key")
contexts:
- name: lab
  context: {cluster: lab, user: $name}
current-context: lab
EOF
}

key ca
openssl req -x509 -new -key ca.key -subj "/CN=lab-cluster-ca" -days 30 -out ca.crt 2>/dev/null
# 10.96.0.1: the kubernetes Service of --service-cluster-ip-range 10.96.0.0/12.
sign apiserver "/CN=kube-apiserver" \
    "IP:$api_ip,IP:10.96.0.1,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
sign apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
sign admin "/O=system:masters/CN=lab-admin"
sign controller-manager "/CN=system:kube-controller-manager"
sign scheduler "/CN=system:kube-scheduler"
sign coredns "/CN=coredns"
for n in admin controller-manager scheduler coredns; do kubeconfig "$n"; done
for node in "$@"; do
    sign "node-$node" "/O=system:nodes/CN=system:node:$node"
    kubeconfig "node-$node"
done
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out sa.key 2>/dev/null
openssl pkey -in sa.key -pubout -out sa.pub 2>/dev/null
