"""deploy/k8s and `brisk plan --emit`, checked offline: there is no Kubernetes cluster here.

What is checked:
- every built-in resource against the official Kubernetes JSON schemas for two versions, strict
  (an unknown field is an error), from the pinned `kubernetes-validate` package;
- the InferencePool against a schema written below from the Gateway API Inference Extension's
  API reference (inference.networking.k8s.io/v1), since no PyPI package ships its CRD;
- the references between them: selectors, ports, probes, shutdown timing, the HPA's target;
- that the Deployment's own args start brisk (model path, host and port substituted) and that it
  drains and exits 0 within the pod's grace period;
- that `brisk plan --emit k8s` writes what the plan's --json says, valid by the same schemas.

What is not: a scheduler placing pods on GPUs, the Prometheus adapter, the endpoint picker.
"""

from __future__ import annotations

import copy
import subprocess
import time
from pathlib import Path

import httpx
import jsonschema
import kubernetes_validate
import pytest
import yaml

from conftest import (BRISK_BIN, REPO_ROOT, Server, brisk_home, free_port, model_path,
                      require_file)

# Shares nothing with other tests and measures no time: runs beside another test (Makefile).
pytestmark = pytest.mark.parallel

K8S_DIR = REPO_ROOT / "deploy" / "k8s"
MANIFEST_FILES = sorted(K8S_DIR.glob("*.yaml"))
# 1.30: the first release with the preStop `sleep` action on by default; 1.37: the newest
# schemas in kubernetes-validate 1.37.0.
KUBERNETES_VERSIONS = ("1.30.0", "1.37.0")
STOP_TIMEOUT_S = 20

# --- The InferencePool schema ----------------------------------------------------------------
# Written from the API reference of inference.networking.k8s.io/v1 (Gateway API Inference
# Extension v1.0): spec.selector.matchLabels, spec.targetPorts[].number, spec.appProtocol and
# spec.endpointPickerRef {group, kind, name, port.number, failureMode}; the patterns are
# Kubernetes' usual name rules. Closed objects: a misspelt field is an error, as kubectl's
# server-side validation of the CRD would make it.
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
LABEL_KEY = (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
             r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"

PORT = {
    "type": "object",
    "additionalProperties": False,
    "required": ["number"],
    "properties": {"number": {"type": "integer", "minimum": 1, "maximum": 65535}},
}
LABELS = {
    "type": "object",
    "propertyNames": {"pattern": LABEL_KEY, "maxLength": 253},
    "additionalProperties": {"type": "string", "pattern": LABEL_VALUE},
}
INFERENCE_POOL_V1 = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "inference.networking.k8s.io/v1"},
        "kind": {"const": "InferencePool"},
        "metadata": {
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {"type": "string", "pattern": DNS_SUBDOMAIN, "maxLength": 253},
                "namespace": {"type": "string", "pattern": DNS_LABEL, "maxLength": 63},
                "labels": LABELS,
                "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        },
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["selector", "targetPorts", "endpointPickerRef"],
            "properties": {
                # Only matchLabels, like a Service's selector.
                "selector": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["matchLabels"],
                    "properties": {
                        "matchLabels": {**LABELS, "minProperties": 1, "maxProperties": 64},
                    },
                },
                "targetPorts": {"type": "array", "minItems": 1, "maxItems": 8,
                                "uniqueItems": True, "items": PORT},
                "appProtocol": {"enum": ["http", "kubernetes.io/h2c"]},
                "endpointPickerRef": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["name"],
                    "properties": {
                        "group": {"type": "string", "maxLength": 253,
                                  "pattern": r"^$|" + DNS_SUBDOMAIN[1:]},
                        "kind": {"type": "string", "minLength": 1, "maxLength": 63,
                                 "pattern": r"^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$"},
                        "name": {"type": "string", "minLength": 1, "maxLength": 253},
                        "port": PORT,
                        "failureMode": {"enum": ["FailOpen", "FailClose"]},
                    },
                    # The kind defaults to Service, and a Service reference needs its port.
                    "if": {"anyOf": [{"not": {"required": ["kind"]}},
                                     {"required": ["kind"],
                                      "properties": {"kind": {"const": "Service"}}}]},
                    "then": {"required": ["port"]},
                },
            },
        },
    },
}
jsonschema.Draft202012Validator.check_schema(INFERENCE_POOL_V1)


# --- Helpers ---------------------------------------------------------------------------------

def load_documents(text: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(text) if doc is not None]


def static_manifests() -> dict[str, dict]:
    """deploy/k8s by kind; each kind appears once."""
    by_kind: dict[str, dict] = {}
    for path in MANIFEST_FILES:
        for doc in load_documents(path.read_text()):
            assert doc["kind"] not in by_kind, f"two {doc['kind']}s in deploy/k8s"
            by_kind[doc["kind"]] = doc
    return by_kind


def schema_errors(doc: dict) -> list[str]:
    """Where `doc` breaks its schema, in words; empty when it is valid."""
    if doc.get("kind") == "InferencePool":
        validator = jsonschema.Draft202012Validator(INFERENCE_POOL_V1)
        return [f"InferencePool {'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}"
                for e in validator.iter_errors(doc)]
    errors = []
    for version in KUBERNETES_VERSIONS:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            where = "/".join(map(str, e.absolute_path)) or "(root)"
            errors.append(f"{doc.get('kind')} on Kubernetes {version}: {where}: {e.message}")
        except kubernetes_validate.SchemaNotFoundError as e:
            errors.append(e.message)
    return errors


def container_of(deployment: dict) -> dict:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1, containers
    return containers[0]


def flag_value(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


def selects(selector: dict, labels: dict) -> bool:
    return bool(selector) and all(labels.get(key) == value for key, value in selector.items())


def port_number(container: dict, port) -> int | None:
    """A probe's or Service's port (a name or a number) as the container's port number."""
    for declared in container.get("ports", []):
        if port in (declared.get("name"), declared["containerPort"]):
            return declared["containerPort"]
    return None


def cross_reference_problems(docs: dict[str, dict]) -> list[str]:
    """What does not fit together between the Deployment and the rest, in words."""
    problems = []
    deployment = docs["Deployment"]
    pod = deployment["spec"]["template"]
    pod_labels = pod["metadata"]["labels"]
    container = container_of(deployment)
    args = container["args"]
    serve_port = int(flag_value(args, "--port"))

    if not selects(deployment["spec"]["selector"]["matchLabels"], pod_labels):
        problems.append("the Deployment's selector does not match its own pod labels")
    if port_number(container, serve_port) != serve_port:
        problems.append(f"no containerPort for brisk's --port {serve_port}")
    for name, path in (("readinessProbe", "/ready"), ("livenessProbe", "/health"),
                       ("startupProbe", "/health")):
        probe = container.get(name)
        if probe is None:
            problems.append(f"no {name}")
            continue
        if probe["httpGet"]["path"] != path:
            problems.append(f"{name} asks {probe['httpGet']['path']}, brisk answers {path}")
        if port_number(container, probe["httpGet"]["port"]) != serve_port:
            problems.append(f"{name} port {probe['httpGet']['port']} is not --port {serve_port}")

    drain_s = int(flag_value(args, "--drain-timeout") or 10)  # brisk serve's default
    sleep_s = container.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
    grace_s = pod["spec"].get("terminationGracePeriodSeconds", 30)
    if sleep_s <= 0:
        problems.append("no preStop sleep: the pod gets SIGTERM while it still gets traffic")
    if grace_s <= sleep_s + drain_s:
        problems.append(f"terminationGracePeriodSeconds {grace_s} <= preStop sleep {sleep_s} "
                        f"+ --drain-timeout {drain_s}: the kubelet kills brisk mid-drain")
    if flag_value(args, "--metrics-compat") != "vllm":
        problems.append("no --metrics-compat vllm: the endpoint picker reads vLLM's names")

    model = flag_value(args, "--model") or ""
    mounts = [m["mountPath"] for m in container.get("volumeMounts", [])]
    if not any(model.startswith(mount.rstrip("/") + "/") for mount in mounts):
        problems.append(f"--model {model} is on no mounted volume ({mounts})")

    resources = container.get("resources", {})
    if "nvidia.com/gpu" in resources.get("requests", {}):
        gpus = resources.get("limits", {}).get("nvidia.com/gpu")
        if gpus != resources["requests"]["nvidia.com/gpu"]:
            problems.append("nvidia.com/gpu: a limit must be set and equal the request")

    service = docs.get("Service")
    if service:
        if not selects(service["spec"]["selector"], pod_labels):
            problems.append("the Service's selector matches no pod of the Deployment")
        for port in service["spec"]["ports"]:
            if port_number(container, port["targetPort"]) != serve_port:
                problems.append(f"Service targetPort {port['targetPort']} is not brisk's port")

    pool = docs.get("InferencePool")
    if pool:
        if not selects(pool["spec"]["selector"]["matchLabels"], pod_labels):
            problems.append("the InferencePool's selector matches no pod of the Deployment")
        for port in pool["spec"]["targetPorts"]:
            if port["number"] != serve_port:
                problems.append(f"InferencePool targetPort {port['number']} is not {serve_port}")

    hpa = docs.get("HorizontalPodAutoscaler")
    if hpa:
        target = hpa["spec"]["scaleTargetRef"]
        if (target["kind"], target["name"]) != ("Deployment", deployment["metadata"]["name"]):
            problems.append(f"the HPA scales {target}, not the Deployment")
        metrics = [(m["type"], m.get("pods", {}).get("metric", {}).get("name"))
                   for m in hpa["spec"]["metrics"]]
        if metrics != [("Pods", "brisk_requests_waiting")]:
            problems.append(f"the HPA's metrics are {metrics}, not the Pods metric "
                            "brisk_requests_waiting")
        if hpa["spec"]["minReplicas"] > hpa["spec"]["maxReplicas"]:
            problems.append("the HPA's minReplicas exceeds maxReplicas")
    return problems


def local_args(args: list[str], port: int) -> list[str]:
    """The container's args for this machine: the model from the local cache, loopback, a free
    port. Everything else stays as the manifest has it."""
    local = list(args)
    model = Path(flag_value(local, "--model"))
    local[local.index("--model") + 1] = str(brisk_home() / "models" / model.name)
    local[local.index("--host") + 1] = "127.0.0.1"
    local[local.index("--port") + 1] = str(port)
    return local


def serve_supports(flag: str) -> bool:
    proc = subprocess.run([str(BRISK_BIN), "serve", "--help"], capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 0, proc.stderr
    return flag in proc.stdout


def start_and_drain(deployment: dict, tmp_path: Path) -> httpx.Response:
    """Starts brisk with the Deployment's command and args; returns its /metrics after /ready
    answered 200; then SIGTERMs it and checks it exits 0 within the grace the pod has left after
    the preStop sleep."""
    require_file(BRISK_BIN, "build brisk first (make)")
    container = container_of(deployment)
    assert container["command"] == ["brisk"], container["command"]
    args = container["args"]
    require_file(brisk_home() / "models" / Path(flag_value(args, "--model")).name,
                 f"fetch the model first: {BRISK_BIN} pull gemma3-270m")
    port = free_port()
    argv = [str(BRISK_BIN), *local_args(args, port)]
    if "--metrics-compat" in argv and not serve_supports("--metrics-compat"):
        # The flag lands on main with issue 14's metrics work; until this build has it, check
        # the rest and report the gap instead of passing silently.
        at = argv.index("--metrics-compat")
        del argv[at:at + 2]
        missing_compat = True
    else:
        missing_compat = False
    server = Server(name="brisk-k8s", argv=argv, port=port, log_path=tmp_path / "brisk.log")
    try:
        server.start("/ready")
        metrics = httpx.get(server.base_url + "/metrics", timeout=10)
        pod = deployment["spec"]["template"]["spec"]
        grace_left_s = (pod["terminationGracePeriodSeconds"]
                        - container["lifecycle"]["preStop"]["sleep"]["seconds"])
        started = time.monotonic()
        code = server.terminate(timeout=min(grace_left_s, STOP_TIMEOUT_S))
        assert code == 0, (f"brisk should exit 0 within {grace_left_s}s of SIGTERM, got "
                           f"{'a hang (killed)' if code is None else code}\n{server.log_tail()}")
        assert time.monotonic() - started < grace_left_s
    finally:
        server.kill()
    assert metrics.status_code == 200, metrics.text[:300]
    if missing_compat:
        pytest.xfail("this brisk has no --metrics-compat yet; every other arg of the "
                     "Deployment started it, /ready answered 200 and it drained cleanly")
    return metrics


def plan(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BRISK_BIN), "plan", *args], capture_output=True, text=True,
                          timeout=120)


def emitted_and_planned(*plan_args: str) -> tuple[dict[str, dict], dict]:
    """`brisk plan ARGS --emit k8s` by kind, and the recommended candidate of `--json`."""
    require_file(BRISK_BIN, "build brisk first (make)")
    emitted = plan(*plan_args, "--emit", "k8s")
    assert emitted.returncode == 0, emitted.stderr
    docs = {doc["kind"]: doc for doc in load_documents(emitted.stdout)}
    assert set(docs) == {"Deployment", "HorizontalPodAutoscaler"}, emitted.stdout
    as_json = plan(*plan_args, "--json")
    assert as_json.returncode == 0, as_json.stderr
    result = yaml.safe_load(as_json.stdout)  # JSON is YAML
    recommended = result["recommendation"]["device"]
    candidate = next(c for c in result["candidates"] if c["device"] == recommended)
    return docs, {**candidate, "workload": result["workload"], "model": result["model"]}


# --- The static manifests --------------------------------------------------------------------

def test_the_manifests_are_all_there():
    kinds = set(static_manifests())
    assert kinds == {"Deployment", "Service", "HorizontalPodAutoscaler", "InferencePool",
                     "PersistentVolumeClaim"}, kinds


@pytest.mark.parametrize("path", MANIFEST_FILES, ids=lambda p: p.name)
def test_manifest_is_valid_by_its_schema(path):
    for doc in load_documents(path.read_text()):
        assert schema_errors(doc) == [], path


def test_manifests_reference_each_other_consistently():
    assert cross_reference_problems(static_manifests()) == []


def test_the_inference_pool_is_the_current_api():
    pool = static_manifests()["InferencePool"]
    # v1 replaced v1alpha2's targetPortNumber and extensionRef.
    assert pool["apiVersion"] == "inference.networking.k8s.io/v1"
    assert "targetPortNumber" not in pool["spec"] and "extensionRef" not in pool["spec"]


def test_the_hpa_comment_names_the_adapter_it_needs():
    text = (K8S_DIR / "hpa.yaml").read_text()
    assert "Pods metric" in text and "prometheus-adapter" in text and "custom.metrics.k8s.io" in text


BROKEN = {
    "a misspelt field": ("Deployment", lambda d: container_of(d).__setitem__(
        "readinesProbe", container_of(d).pop("readinessProbe"))),
    "a port as a string": ("Deployment", lambda d: container_of(d)["ports"][0].__setitem__(
        "containerPort", "8080")),
    "a pool without its endpoint picker": ("InferencePool",
                                           lambda d: d["spec"].pop("endpointPickerRef")),
    "a picker Service without its port": ("InferencePool",
                                          lambda d: d["spec"]["endpointPickerRef"].pop("port")),
    "the alpha field name": ("InferencePool", lambda d: d["spec"].__setitem__(
        "targetPortNumber", 8080)),
    "a Service selecting other pods": ("Service", lambda d: d["spec"]["selector"].__setitem__(
        "app.kubernetes.io/name", "brisc")),
    "a pool on the wrong port": ("InferencePool",
                                 lambda d: d["spec"]["targetPorts"][0].__setitem__("number", 8081)),
    "a grace period shorter than the drain": ("Deployment", lambda d: d["spec"]["template"][
        "spec"].__setitem__("terminationGracePeriodSeconds", 12)),
    "a readiness probe on /health": ("Deployment", lambda d: container_of(d)["readinessProbe"][
        "httpGet"].__setitem__("path", "/health")),
    "an HPA on another metric": ("HorizontalPodAutoscaler", lambda d: d["spec"]["metrics"][0][
        "pods"]["metric"].__setitem__("name", "brisk_requests_running")),
}


@pytest.mark.parametrize("breakage", sorted(BROKEN))
def test_a_broken_manifest_is_caught(breakage):
    """The checks above can fail: each breakage is found by the schemas or the references."""
    kind, damage = BROKEN[breakage]
    docs = copy.deepcopy(static_manifests())
    damage(docs[kind])
    try:
        problems = cross_reference_problems(docs)
    except (KeyError, TypeError, ValueError) as e:  # a field the references need is gone
        problems = [repr(e)]
    assert schema_errors(docs[kind]) + problems, f"{breakage} went unnoticed"


def test_the_deployment_args_start_brisk_and_it_drains_in_time(tmp_path):
    metrics = start_and_drain(static_manifests()["Deployment"], tmp_path)
    for name in ("vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
        assert name in metrics.text, f"{name} missing from /metrics with --metrics-compat vllm"


# --- brisk plan --emit -----------------------------------------------------------------------

EMIT_CASES = {
    # 141 GB of BF16 weights: two or more H100s per replica, several replicas.
    "70b-tensor-parallel": ("--model", "llama-3.1-70b", "--precision", "bf16", "--devices",
                            "h100-sxm", "--concurrency", "64", "--slo",
                            "ttft_p95=2000ms,tpot_p95=60ms", "--max-devices", "16"),
    "8b-poisson": ("--model", "llama-3.1-8b", "--devices", "l4,a100-80gb", "--rate", "4",
                   "--step-tokens", "1024", "--target-itl-ms", "80", "--slo",
                   "ttft_p95=1000ms,tpot_p95=50ms"),
    "270m-cpu": ("--model", "gemma3-270m", "--devices", "cpu-2vcpu", "--isl", "128", "--osl",
                 "64", "--concurrency", "2", "--slo", "tpot_p95=200ms"),
}


@pytest.mark.parametrize("case", sorted(EMIT_CASES))
def test_plan_emit_k8s_is_valid_and_deploys_what_was_planned(case):
    plan_args = EMIT_CASES[case]
    if "gemma3-270m" in plan_args:
        require_file(model_path(), "run `brisk pull gemma3-270m`")
    emitted, planned = emitted_and_planned(*plan_args)
    for doc in emitted.values():
        assert schema_errors(doc) == []
    # With the static Service and InferencePool it replaces deployment.yaml and hpa.yaml.
    together = {**static_manifests(), **emitted}
    assert cross_reference_problems(together) == []

    deployment, hpa = emitted["Deployment"], emitted["HorizontalPodAutoscaler"]
    container = container_of(deployment)
    args = container["args"]
    assert deployment["spec"]["replicas"] == planned["replicas"]
    assert hpa["spec"]["minReplicas"] == planned["replicas"]
    max_devices = int(flag_value(list(plan_args), "--max-devices") or 8)
    assert hpa["spec"]["maxReplicas"] == max(planned["replicas"],
                                             max_devices // planned["devices_per_replica"])
    gpus = container["resources"]["limits"].get("nvidia.com/gpu")
    if planned["device"].startswith("cpu"):
        assert gpus is None
    else:
        assert gpus == planned["devices_per_replica"]
    workload = planned["workload"]
    max_seqs = int(flag_value(args, "--max-seqs"))
    assert max_seqs >= planned["max_concurrency"]
    if workload["rate"] is None:
        assert max_seqs == planned["max_concurrency"]
    assert int(flag_value(args, "--ctx-size")) == max_seqs * (workload["input_tokens"]
                                                             + workload["output_tokens"])
    step_tokens = flag_value(list(plan_args), "--step-tokens") or "512"
    assert flag_value(args, "--max-batched-tokens") == step_tokens
    # The step target the prediction simulated (brisk serve's default unless the plan set one).
    target = flag_value(list(plan_args), "--target-itl-ms") or "150"
    assert float(flag_value(args, "--target-itl-ms")) == float(target)
    assert flag_value(args, "--served-model-name") == planned["model"]["id"]


def test_plan_emit_k8s_keeps_the_static_deployments_pod_shape():
    """Only what the plan decides differs from deploy/k8s/deployment.yaml."""
    emitted, _ = emitted_and_planned(*EMIT_CASES["8b-poisson"])
    static = container_of(static_manifests()["Deployment"])
    mine = container_of(emitted["Deployment"])
    for key in ("command", "ports", "startupProbe", "livenessProbe", "readinessProbe",
                "lifecycle", "volumeMounts"):
        assert mine[key] == static[key], key
    static_pod = static_manifests()["Deployment"]["spec"]["template"]
    emitted_pod = emitted["Deployment"]["spec"]["template"]
    assert emitted_pod["metadata"] == static_pod["metadata"]
    assert (emitted_pod["spec"]["terminationGracePeriodSeconds"]
            == static_pod["spec"]["terminationGracePeriodSeconds"])
    assert emitted_pod["spec"]["volumes"] == static_pod["spec"]["volumes"]
    static_flags = {a for a in static["args"] if a.startswith("--")}
    assert {a for a in mine["args"] if a.startswith("--")} <= static_flags


def test_plan_emit_k8s_args_start_brisk(tmp_path):
    require_file(model_path(), "run `brisk pull gemma3-270m`")
    emitted, _ = emitted_and_planned(*EMIT_CASES["270m-cpu"])
    start_and_drain(emitted["Deployment"], tmp_path)


def test_plan_emit_haproxy_is_a_valid_backend(tmp_path):
    proc = plan(*EMIT_CASES["70b-tensor-parallel"], "--emit", "haproxy")
    assert proc.returncode == 0, proc.stderr
    planned = emitted_and_planned(*EMIT_CASES["70b-tensor-parallel"])[1]
    servers = [line for line in proc.stdout.splitlines() if line.strip().startswith("server ")]
    assert len(servers) == planned["replicas"]
    config = tmp_path / "haproxy.cfg"
    config.write_text(
        "defaults\n    mode http\n    timeout connect 5s\n    timeout client 300s\n"
        "    timeout server 300s\n    timeout queue 60s\n"
        f"frontend openai\n    bind 127.0.0.1:{free_port()}\n    default_backend brisk\n"
        + proc.stdout)
    check = subprocess.run(["haproxy", "-c", "-f", str(config)], capture_output=True, text=True,
                           timeout=30)
    assert check.returncode == 0, check.stdout + check.stderr


def test_plan_emit_refuses_a_plan_that_meets_no_slo():
    proc = plan("--model", "llama-3.1-70b", "--devices", "t4", "--max-devices", "1",
                "--emit", "k8s")
    assert proc.returncode == 2
    assert "nothing to deploy" in proc.stderr
    assert proc.stdout == ""
