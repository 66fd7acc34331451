#!/usr/bin/env python3
"""Network programming latency as a user feels it: from the API write to the first request
answered through the Service (or, for a removed endpoint, to the last request that still
reached it), asked from a pod on the other node than the backends.

    latency.py --kubeconfig FILE --out DIR --metrics URL [--changes N] [--services M]
               [--every SECONDS]

Three kinds of change, N of each (default 200), one every SECONDS (default 2) while earlier
ones are still measured, as changes come in a cluster that is in use:
  service-create   a Service created whose selector matches a ready pod
  scale-up         a Deployment scaled from 0 to 1 (the pod's start is part of what is felt)
  endpoint-removed a ready pod's label changed so that it leaves its Service's endpoints,
                   of two; measured to the last answer that still came from it
First M Services without pods are created (in lab-bulk), as the API objects a large cluster
holds: the proxy must program them all before the measurements start.

The probes run in the prober pod on node-2 (agnhost netexec's /shell: a curl loop, one per
change, timed by the pod's own clock, so that no clock skew between host and node enters);
the host stamps the write when the API server's answer arrives and the probe's start when
it sends it. The proxy's own `kubeproxy_network_programming_duration_seconds` histogram on
node-2 (URL) is read before and after each kind, and its p50/p99 estimated from the buckets'
difference. Writes DIR/latency.json and DIR/latency.txt; exits 1 when a kind had probes that
never saw their answer.

Only the standard library: the host runs it with the harness's python3.
"""

import argparse
import base64
import concurrent.futures
import json
import os
import re
import ssl
import statistics
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

NS, BULK_NS = "lab-latency", "lab-bulk"
IMAGE = "registry.k8s.io/e2e-test-images/agnhost:2.66.1"
KINDS = ("service-create", "scale-up", "endpoint-removed")
# Each probe's own bound: kube-proxy's syncs under emulation take 10-20 s, its full syncs
# at 5,000 Services minutes.
PROBE_TIMEOUT = 600
POOL = 10  # Deployments and Service pairs reused in turn by scale-up and endpoint-removed


class Api:
    """The API server, through the admin kubeconfig's embedded certificates."""

    def __init__(self, kubeconfig):
        text = open(kubeconfig).read()

        def field(name):
            m = re.search(rf"^\s*{name}:\s*(\S+)\s*$", text, re.M)
            if not m:
                sys.exit(f"latency: no {name} in {kubeconfig}")
            return m.group(1)
        self.server = field("server")
        self.tmp = tempfile.TemporaryDirectory()
        paths = {}
        for name in ("certificate-authority-data", "client-certificate-data", "client-key-data"):
            paths[name] = os.path.join(self.tmp.name, name)
            with open(paths[name], "wb") as f:
                f.write(base64.b64decode(field(name)))
        self.ctx = ssl.create_default_context(cafile=paths["certificate-authority-data"])
        self.ctx.load_cert_chain(paths["client-certificate-data"], paths["client-key-data"])

    def call(self, method, path, body=None, content="application/json", ok=(200, 201)):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method,
                                     headers={"Content-Type": content})
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=60) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:
            if e.code in ok:
                return json.load(e)
            raise RuntimeError(f"{method} {path}: {e.code} {e.read()[:300]!r}") from None

    def create(self, ns, kind, obj, exist_ok=False):
        path = f"/api/v1/namespaces/{ns}/{kind}" if kind != "deployments" else \
            f"/apis/apps/v1/namespaces/{ns}/deployments"
        try:
            return self.call("POST", path, obj)
        except RuntimeError as e:
            if exist_ok and " 409 " in str(e):
                return None
            raise

    def patch(self, path, body):
        return self.call("PATCH", path, body, content="application/merge-patch+json")


def pod(name, labels, node, args):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "c", "image": IMAGE, "args": args}]}}


def service(name, selector, ports=((80, 8080),)):
    spec = {"ports": [{"name": f"p{p}", "port": p, "targetPort": t} for p, t in ports]}
    if selector:
        spec["selector"] = selector
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec}


def deployment(name, node):
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": 0, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0,
                                           "containers": [{"name": "c", "image": IMAGE,
                                                           "args": ["netexec",
                                                                    "--http-port=8080"]}]}}}}


class Prober:
    """The prober pod's /shell: each call runs one shell script in the pod."""

    def __init__(self, ip):
        self.base = f"http://{ip}:8080/shell?cmd="

    def run(self, script, timeout=PROBE_TIMEOUT + 30):
        url = self.base + urllib.parse.quote(script)
        with urllib.request.urlopen(url, timeout=timeout) as r:
            out = json.load(r)
        return out.get("output", ""), out.get("error", "")

    def until_answer(self, ip, want=None):
        """Seconds from the script's start to the first answer through ip (from a pod whose
        name starts with `want`, when given), or None after PROBE_TIMEOUT."""
        test = f'case "$a" in {want}*) break ;; esac' if want else '[ -n "$a" ] && break'
        script = (f's=$(date +%s.%N); while :; do a=$(curl -sf -m 0.3 http://{ip}/hostname); '
                  f'{test}; n=$(date +%s); [ $((n - ${{s%.*}})) -gt {PROBE_TIMEOUT} ] && '
                  f'{{ echo timeout; exit 0; }}; sleep 0.1; done; e=$(date +%s.%N); echo "$s $e"')
        return self._span(script)

    def until_gone(self, ip, gone, streak=10):
        """Seconds from the script's start to the sending of the first of `streak` answers in
        a row through ip that did not come from `gone` (the last answer from it came just
        before), or None after PROBE_TIMEOUT."""
        script = (f's=$(date +%s.%N); k=0; f=$s; while [ $k -lt {streak} ]; do '
                  f't=$(date +%s.%N); a=$(curl -sf -m 0.5 http://{ip}/hostname); '
                  f'if [ "$a" = {gone} ] || [ -z "$a" ]; then k=0; else [ $k = 0 ] && f=$t; '
                  f'k=$((k + 1)); fi; n=${{t%.*}}; [ $((n - ${{s%.*}})) -gt {PROBE_TIMEOUT} ] '
                  f'&& {{ echo timeout; exit 0; }}; done; echo "$s $f"')
        return self._span(script)

    def _span(self, script):
        out, err = self.run(script)
        parts = out.split()
        if len(parts) != 2:
            return None
        return float(parts[1]) - float(parts[0])


def wait_ready(api, ns, names, timeout=900):
    deadline = time.time() + timeout
    while time.time() < deadline:
        ready = {}
        for p in api.call("GET", f"/api/v1/namespaces/{ns}/pods")["items"]:
            conds = {c["type"]: c["status"] for c in p["status"].get("conditions", [])}
            ready[p["metadata"]["name"]] = (conds.get("Ready") == "True", p["status"].get("podIP"))
        if all(ready.get(n, (False,))[0] for n in names):
            return {n: ready[n][1] for n in names}
        time.sleep(2)
    sys.exit(f"latency: pods not Ready in {timeout} s: {names}")


def histogram(url):
    with urllib.request.urlopen(url, timeout=30) as r:
        return buckets(r.read().decode())


def buckets(text):
    """{le: cumulative count} of kubeproxy_network_programming_duration_seconds (IPv4) in a
    metrics exposition."""
    out = {}
    for line in text.splitlines():
        m = re.match(r'kubeproxy_network_programming_duration_seconds_bucket\{(.*)\} (\S+)', line)
        if m and 'ip_family="IPv6"' not in m.group(1):
            le = re.search(r'le="([^"]+)"', m.group(1)).group(1)
            key = float("inf") if le == "+Inf" else float(le)
            out[key] = out.get(key, 0) + float(m.group(2))
    return out


def quantile_of(before, after, q):
    """The q-quantile of what the histogram gained, linear within its bucket (as Prometheus'
    histogram_quantile), or None when it gained nothing."""
    delta = sorted((le, after.get(le, 0) - before.get(le, 0)) for le in after)
    total = delta[-1][1] if delta else 0
    if total <= 0:
        return None, 0
    rank, lower, below = q * total, 0.0, 0.0
    for le, count in delta:
        if count >= rank:
            if le == float("inf"):
                return lower, int(total)
            return lower + (le - lower) * (rank - below) / max(count - below, 1e-9), int(total)
        lower, below = le, count
    return lower, int(total)


def quantile(values, q):
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--metrics", required=True, help="node-2's proxy metrics URL")
    ap.add_argument("--changes", type=int, default=200)
    ap.add_argument("--services", type=int, default=0)
    ap.add_argument("--every", type=float, default=2.0)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    log = open(os.path.join(args.out, "latency.txt"), "w")

    def say(msg):
        line = f"latency: {msg}"
        print(line, file=sys.stderr, flush=True)
        log.write(line + "\n")
        log.flush()

    api = Api(args.kubeconfig)
    for ns in (NS, BULK_NS):
        api.call("POST", "/api/v1/namespaces",
                 {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}, ok=(409,))
    t = time.time()
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        list(ex.map(lambda i: api.create(BULK_NS, "services", service(f"bulk-{i}", None),
                                         exist_ok=True), range(args.services)))
    say(f"{args.services} Services without pods created in {time.time() - t:.0f} s")
    names = ["prober", "backend"]
    api.create(NS, "pods", pod("prober", {"app": "prober"}, "node-2",
                               ["netexec", "--http-port=8080"]))
    api.create(NS, "pods", pod("backend", {"app": "backend"}, "node-1",
                               ["netexec", "--http-port=8080"]))
    for j in range(POOL):
        api.create(NS, "deployments", deployment(f"scaled-{j}", "node-1"))
        api.create(NS, "services", service(f"scaled-{j}", {"app": f"scaled-{j}"}))
        api.create(NS, "services", service(f"pair-{j}", {"app": f"pair-{j}"}))
        for side in "ab":
            api.create(NS, "pods", pod(f"pair-{j}-{side}", {"app": f"pair-{j}"}, "node-1",
                                       ["netexec", "--http-port=8080"]))
            names.append(f"pair-{j}-{side}")
    ips = wait_ready(api, NS, names)
    prober = Prober(ips["prober"])
    svc_ip = {s["metadata"]["name"]: s["spec"]["clusterIP"]
              for s in api.call("GET", f"/api/v1/namespaces/{NS}/services")["items"]}
    # The bulk is programmed once a Service created after it answers.
    marker = api.create(NS, "services", service("marker", {"app": "backend"}))
    t = time.time()
    span = prober.until_answer(marker["spec"]["clusterIP"])
    if span is None:
        sys.exit("latency: the marker Service never answered")
    say(f"marker Service answered after {time.time() - t:.1f} s: the proxy holds the bulk")
    for j in range(POOL):
        if prober.until_answer(svc_ip[f"pair-{j}"]) is None:
            sys.exit(f"latency: pair-{j} never answered")

    slots = [threading.Lock() for _ in range(POOL)]

    def service_create(i):
        obj = api.create(NS, "services", service(f"create-{i}", {"app": "backend"}))
        written = time.time()
        sent = time.time()
        span = prober.until_answer(obj["spec"]["clusterIP"])
        return None if span is None else sent - written + span

    def scale_up(i):
        j = i % POOL
        with slots[j]:
            path = f"/apis/apps/v1/namespaces/{NS}/deployments/scaled-{j}"
            api.patch(path, {"spec": {"replicas": 1}})
            written = time.time()
            sent = time.time()
            span = prober.until_answer(svc_ip[f"scaled-{j}"])
            result = None if span is None else sent - written + span
            api.patch(path, {"spec": {"replicas": 0}})
            # Back to no endpoint before the slot is used again.
            prober.run(f'while curl -sf -m 0.3 http://{svc_ip[f"scaled-{j}"]}/hostname; '
                       'do sleep 0.2; done')
            return result

    def endpoint_removed(i):
        j = i % POOL
        with slots[j]:
            path = f"/api/v1/namespaces/{NS}/pods/pair-{j}-a"
            api.patch(path, {"metadata": {"labels": {"app": f"parked-{j}"}}})
            written = time.time()
            sent = time.time()
            span = prober.until_gone(svc_ip[f"pair-{j}"], f"pair-{j}-a")
            api.patch(path, {"metadata": {"labels": {"app": f"pair-{j}"}}})
            prober.until_answer(svc_ip[f"pair-{j}"], want=f"pair-{j}-a")
            return None if span is None else sent - written + span

    results = {"changes": args.changes, "services": args.services, "every": args.every,
               "kinds": {}}
    for kind, fn in zip(KINDS, (service_create, scale_up, endpoint_removed)):
        before = histogram(args.metrics)
        t = time.time()
        futures = []

        def guarded(fn, i):
            # One change's failure (an API error, a probe cut off) is a sample lost, not the run.
            try:
                return fn(i)
            except Exception as e:  # noqa: BLE001
                say(f"{fn.__name__} {i}: {e}")
                return None
        with concurrent.futures.ThreadPoolExecutor(max(POOL, 64)) as ex:
            for i in range(args.changes):
                futures.append(ex.submit(guarded, fn, i))
                time.sleep(args.every)
            values = [f.result() for f in futures]
        after = histogram(args.metrics)
        seen = [v for v in values if v is not None]
        p50h, n = quantile_of(before, after, 0.5)
        p99h, _ = quantile_of(before, after, 0.99)
        results["kinds"][kind] = {
            "samples": [None if v is None else round(v, 3) for v in values],
            "n": len(seen), "unanswered": len(values) - len(seen),
            "p50": quantile(seen, 0.5), "p99": quantile(seen, 0.99),
            "mean": statistics.fmean(seen) if seen else None,
            "histogram": {"count": n, "p50": p50h, "p99": p99h},
        }
        r = results["kinds"][kind]
        say(f"{kind}: {r['n']} answered, {r['unanswered']} not, in {time.time() - t:.0f} s: "
            f"p50 {r['p50']} s, p99 {r['p99']} s; the proxy's histogram: {n} observations, "
            f"p50 {p50h}, p99 {p99h}")
    with open(os.path.join(args.out, "latency.json"), "w") as f:
        json.dump(results, f, indent=1, sort_keys=True)
        f.write("\n")
    return 1 if any(k["unanswered"] for k in results["kinds"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
