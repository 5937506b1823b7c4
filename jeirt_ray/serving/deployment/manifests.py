"""Static checks of the Kubernetes manifests (k8s/) and Serve configs (deployments/).

No cluster is needed: core kinds are validated against the Kubernetes OpenAPI schemas bundled
by `kubernetes-validate` (strict: unknown fields are errors); RayJob, RayCronJob, RayService and
RayCluster against the KubeRay CRDs' OpenAPI schemas, made strict the same way (an unknown field is an
error; a required field that has a default may be omitted, as the API server fills it in);
every Serve config against Ray's own ServeDeploySchema plus a check for unknown keys (which
that schema silently ignores); the Ray versions of pyproject.toml, the image and every
manifest must agree; every pod runs hardened (`check_hardening`); and every RayService keeps
GCS fault tolerance, the autoscaler and its replicas spread over nodes (`check_service_resilience`).
`jeirt k8s-check` runs them all.
"""

from __future__ import annotations

import re
import typing
from pathlib import Path

import yaml

from .ingress import HAPROXY_ENV

K8S_VERSION = "1.33.0"
# where each KubeRay kind holds its Ray cluster's spec, under `spec`
CLUSTER_AT = {"RayCluster": (), "RayJob": ("rayClusterSpec",), "RayService": ("rayClusterConfig",),
              "RayCronJob": ("jobTemplate", "rayClusterSpec")}
CRD_KINDS = set(CLUSTER_AT)


def load_docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(Path(path).read_text()) if d]


# ---- KubeRay CRDs ---------------------------------------------------------------------------
def _strict(schema: dict) -> dict:
    s = dict(schema)
    if s.pop("x-kubernetes-int-or-string", False):
        s.pop("type", None)
        s["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if "properties" in s:
        s["properties"] = {k: _strict(v) for k, v in s["properties"].items()}
        if not s.get("x-kubernetes-preserve-unknown-fields"):
            s.setdefault("additionalProperties", False)
        if "required" in s:
            s["required"] = [r for r in s["required"] if "default" not in s["properties"].get(r, {})]
    if isinstance(s.get("items"), dict):
        s["items"] = _strict(s["items"])
    if isinstance(s.get("additionalProperties"), dict):
        s["additionalProperties"] = _strict(s["additionalProperties"])
    for key in ("allOf", "anyOf", "oneOf"):
        if key in s:
            s[key] = [_strict(x) for x in s[key]]
    return s


def crd_schemas(crd_dir: Path) -> dict[tuple[str, str], dict]:
    """{(apiVersion, kind): strict JSON schema} from KubeRay CRD files."""
    out = {}
    for path in sorted(Path(crd_dir).glob("ray.io_*.yaml")):
        for crd in load_docs(path):
            group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
            for version in crd["spec"]["versions"]:
                out[(f"{group}/{version['name']}", kind)] = _strict(version["schema"]["openAPIV3Schema"])
    if not out:
        raise FileNotFoundError(f"no KubeRay CRDs (ray.io_*.yaml) in {crd_dir}")
    return out


def validate_doc(doc: dict, crds: dict[tuple[str, str], dict]) -> list[str]:
    """Schema errors of one manifest ([] when valid)."""
    kind = doc.get("kind")
    if kind in CRD_KINDS:
        import jsonschema
        schema = crds.get((doc.get("apiVersion"), kind))
        if schema is None:
            return [f"{kind} {doc.get('apiVersion')}: no such KubeRay CRD version"]
        validator = jsonschema.Draft7Validator(schema)
        errors = [f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
                  for e in sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.path)))]
        if kind == "RayService":
            errors += [f"spec.serveConfigV2: {e}" for e in check_serve_config(yaml.safe_load(doc["spec"]["serveConfigV2"]))]
        return errors
    import kubernetes_validate
    try:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        return [f"{'.'.join(map(str, e.path)) or '<root>'}: {e.message}"]
    except kubernetes_validate.utils.SchemaNotFoundError as e:
        return [f"no schema for {kind} {doc.get('apiVersion')}: {e}"]
    return []


# ---- pod hardening ------------------------------------------------------------------------------
RAY_WRITABLE = ("/tmp", "/dev/shm")  # Ray's session files and object store; the rest of / is read-only


def pod_specs(doc: dict) -> dict[str, dict]:
    """{where: pod spec} of every pod template in a manifest."""
    spec, kind = doc.get("spec", {}), doc.get("kind")
    if kind in ("Deployment", "StatefulSet", "Job", "DaemonSet"):
        return {"spec.template.spec": spec.get("template", {}).get("spec", {})}
    found = cluster_spec(doc)
    if found is None:
        return {}
    base, cluster = found
    out = {f"{base}.headGroupSpec.template.spec": cluster.get("headGroupSpec", {}).get("template", {}).get("spec", {})}
    for i, group in enumerate(cluster.get("workerGroupSpecs", [])):
        out[f"{base}.workerGroupSpecs[{i}].template.spec"] = group.get("template", {}).get("spec", {})
    return out


def check_hardening(doc: dict) -> list[str]:
    """Every pod runs as non-root with a read-only root filesystem, no privilege escalation and
    no capabilities; Ray containers get writable emptyDirs at /tmp and /dev/shm."""
    errors = []
    for where, pod in pod_specs(doc).items():
        if not (pod.get("securityContext") or {}).get("runAsNonRoot"):
            errors.append(f"{where}.securityContext.runAsNonRoot: must be true")
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for i, c in enumerate(pod.get("containers", [])):
            at, sc = f"{where}.containers[{i}]({c.get('name')})", c.get("securityContext") or {}
            if sc.get("readOnlyRootFilesystem") is not True:
                errors.append(f"{at}.securityContext.readOnlyRootFilesystem: must be true")
            if sc.get("allowPrivilegeEscalation") is not False:
                errors.append(f"{at}.securityContext.allowPrivilegeEscalation: must be false")
            if "ALL" not in (sc.get("capabilities") or {}).get("drop", []):
                errors.append(f"{at}.securityContext.capabilities.drop: must include ALL")
            if doc.get("kind") in CRD_KINDS:
                mounted = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
                for path in RAY_WRITABLE:
                    if "emptyDir" not in volumes.get(mounted.get(path), {}):
                        errors.append(f"{at}: Ray needs a writable emptyDir mounted at {path}")
    return errors


# ---- who can reach Ray's own ports -------------------------------------------------------------
RAY_PRIVATE_PORTS = {6379: "the GCS", 8265: "the dashboard and Jobs API", 10001: "Ray Client",
                     52365: "the node agents", 8404: "HAProxy's stats page", 9101: "HAProxy's exporter"}
PUBLIC_PORTS = {8000}  # Serve's front door: HAProxy (or Serve's HTTP proxy)


def cluster_spec(doc: dict) -> tuple[str, dict] | None:
    """(where, the Ray cluster spec) of a KubeRay kind (CLUSTER_AT); None for other kinds."""
    path = CLUSTER_AT.get(doc.get("kind"))
    if path is None:
        return None
    spec = doc.get("spec") or {}
    for key in path:
        spec = spec.get(key) or {}
    return ".".join(("spec", *path)), spec


def check_ray_auth(doc: dict) -> list[str]:
    """Every Ray cluster runs with Ray's token authentication."""
    found = cluster_spec(doc)
    if found is None:
        return []
    where, spec = found
    if (spec.get("authOptions") or {}).get("mode") != "token":
        return [f"{where}.authOptions.mode: must be token (Ray's token authentication on the dashboard, Jobs API "
                f"and GCS)"]
    return []


def _selects_ray_pods(selector: dict) -> bool:
    return any(e.get("key") == "ray.io/is-ray-node" and e.get("operator") == "Exists"
               for e in selector.get("matchExpressions", [])) or "ray.io/is-ray-node" in selector.get("matchLabels", {})


def check_network(docs: list[dict]) -> list[str]:
    """A NetworkPolicy selects the Ray pods for ingress, and none of its rules opens one of Ray's
    own ports (RAY_PRIVATE_PORTS) to every source: a rule without `from` may name only
    PUBLIC_PORTS."""
    policies = [d for d in docs if d.get("kind") == "NetworkPolicy"
                and _selects_ray_pods((d.get("spec") or {}).get("podSelector") or {})
                and "Ingress" in (d.get("spec") or {}).get("policyTypes", [])]
    if not policies:
        return ["no NetworkPolicy selects the Ray pods (ray.io/is-ray-node) for ingress: the dashboard, Jobs API "
                "and GCS would be open to every pod (k8s/network-policy.yaml)"]
    errors = []
    for d in policies:
        for i, rule in enumerate(d["spec"].get("ingress", [])):
            if rule.get("from"):
                continue
            ports = {p.get("port") for p in rule.get("ports", [])} or {"every port"}
            opened = sorted(str(p) for p in ports if p not in PUBLIC_PORTS)
            if opened:
                errors.append(f"NetworkPolicy {d['metadata']['name']}.spec.ingress[{i}]: opens {', '.join(opened)} to "
                              f"every source; only {sorted(PUBLIC_PORTS)} may be")
    return errors


def check_service_resilience(doc: dict) -> list[str]:
    """What the cluster tests showed, kept in every RayService: the GCS's tables in Redis (the
    service answers while the head restarts), the in-tree autoscaler with an idle timeout and
    worker groups that can grow, and every Serve deployment of two or more replicas spread over
    nodes (`max_replicas_per_node`), with room for its largest count on the worker groups."""
    if doc.get("kind") != "RayService":
        return []
    at, cluster = "spec.rayClusterConfig", doc.get("spec", {}).get("rayClusterConfig", {})
    errors = []
    ft = cluster.get("gcsFaultToleranceOptions") or {}
    if not (ft.get("redisAddress") or ft.get("backend") == "rocksdb"):
        errors.append(f"{at}.gcsFaultToleranceOptions.redisAddress: missing (without it a head restart loses "
                      f"every Serve application; see k8s/redis.yaml)")
    if cluster.get("enableInTreeAutoscaling") is not True:
        errors.append(f"{at}.enableInTreeAutoscaling: must be true (Serve's replica autoscaling needs nodes)")
    if (cluster.get("autoscalerOptions") or {}).get("idleTimeoutSeconds") is None:
        errors.append(f"{at}.autoscalerOptions.idleTimeoutSeconds: missing (when idle nodes are removed)")
    room = 0
    for i, group in enumerate(cluster.get("workerGroupSpecs", [])):
        low, high = group.get("minReplicas"), group.get("maxReplicas")
        if low is None or high is None or high <= low:
            errors.append(f"{at}.workerGroupSpecs[{i}]({group.get('groupName')}): minReplicas < maxReplicas "
                          f"needed for the autoscaler (got {low}, {high})")
        room += high or 0
    serve = yaml.safe_load(doc.get("spec", {}).get("serveConfigV2") or "{}") or {}
    for app in serve.get("applications", []):
        for dep in app.get("deployments", []):
            auto = dep.get("autoscaling_config") or {}
            low = auto.get("min_replicas", dep.get("num_replicas", 1))
            high = auto.get("max_replicas", dep.get("num_replicas", 1))
            where = f"serveConfigV2 {app.get('name')}/{dep.get('name')}"
            per_node = dep.get("max_replicas_per_node")
            if isinstance(low, int) and low >= 2 and per_node is None:
                errors.append(f"{where}: {low} replicas or more but no max_replicas_per_node "
                              f"(they may share one node and fail together)")
            if per_node and isinstance(high, int) and high > per_node * room:
                errors.append(f"{where}: max {high} replicas, {per_node} per node, but the worker groups "
                              f"reach {room} nodes")
    return errors


def check_front_door(docs: list[dict]) -> list[str]:
    """Every container of every RayService reads ingress.HAPROXY_ENV from the ConfigMaps it
    names (envFrom), so that each pod's port 8000 is HAProxy as `jeirt serve --ingress haproxy`
    sets it up (less its local drain period: a cluster keeps Ray's, which gives Kubernetes time to
    take a stopping pod out of its Service)."""
    maps = {d["metadata"]["name"]: d.get("data") or {} for d in docs if d.get("kind") == "ConfigMap"}
    errors = []
    for doc in docs:
        if doc.get("kind") != "RayService":
            continue
        for where, pod in pod_specs(doc).items():
            for c in pod.get("containers", []):
                env = {}
                for source in c.get("envFrom", []):
                    env.update(maps.get((source.get("configMapRef") or {}).get("name"), {}))
                wrong = {k: env.get(k) for k, v in HAPROXY_ENV.items() if env.get(k) != v}
                if wrong:
                    errors.append(f"RayService {doc['metadata']['name']} {where}({c.get('name')}): its ConfigMaps set "
                                  f"{wrong}, not {HAPROXY_ENV} (the HAProxy front door, k8s/configmap.yaml's "
                                  f"jeirt-serve)")
    return errors


# ---- Serve configs ----------------------------------------------------------------------------
def _model_in(annotation):
    """The pydantic model class inside an annotation like Optional[X], List[X], Union[dict, X]."""
    from pydantic import BaseModel
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    for arg in typing.get_args(annotation):
        model, _ = _model_in(arg)
        if model is not None:
            return model, typing.get_origin(annotation) in (list, typing.List)
    return None, False


def _unknown_keys(raw, model, where: str) -> list[str]:
    if not isinstance(raw, dict):
        return []
    fields = model.model_fields
    names = set(fields) | {f.alias for f in fields.values() if f.alias}
    errors = [f"{where}{k}: unknown key (not in {model.__name__})" for k in raw if k not in names]
    for key, value in raw.items():
        if key not in fields:
            continue
        sub, is_list = _model_in(fields[key].annotation)
        if sub is None:
            continue
        items = value if isinstance(value, list) else [value]
        for i, item in enumerate(items):
            errors += _unknown_keys(item, sub, f"{where}{key}{f'[{i}]' if isinstance(value, list) else ''}.")
    return errors


def check_serve_config(raw: dict) -> list[str]:
    from pydantic import ValidationError
    from ray.serve.config import AutoscalingConfig
    from ray.serve.schema import ServeDeploySchema
    from ..settings import check_application
    try:
        config = ServeDeploySchema.model_validate(raw)
        # typed Union[Dict, AutoscalingConfig] there, so any dict passes: check it as the config it is
        for app in raw.get("applications", []):
            for dep in app.get("deployments", []):
                if isinstance(dep.get("autoscaling_config"), dict):
                    AutoscalingConfig.model_validate(dep["autoscaling_config"])
    except ValidationError as e:
        return [str(e)]
    errors = []
    for app in config.applications:  # this project's args and user_config, typed (settings.py)
        if app.import_path.startswith("jeirt_ray."):
            try:
                check_application(app)
            except ValueError as e:
                errors.append(str(e))
    return errors + _unknown_keys(raw, ServeDeploySchema, "")


# ---- versions ----------------------------------------------------------------------------------
def ray_versions(root: Path) -> dict[str, str]:
    """Where the Ray version is stated: pyproject.toml, the Containerfile, every manifest."""
    found = {}
    pin = re.search(r'"ray\[[^\]]*\]==([\d.]+)"', (root / "pyproject.toml").read_text())
    found["pyproject.toml"] = pin.group(1) if pin else "unpinned"
    arg = re.search(r"ARG RAY_VERSION=([\d.]+)", (root / "k8s" / "Containerfile").read_text())
    found["k8s/Containerfile"] = arg.group(1) if arg else "missing"
    for path in sorted((root / "k8s").glob("*.yaml")):
        for doc in load_docs(path):
            cluster = cluster_spec(doc)
            if cluster is not None:
                found[f"k8s/{path.name}:{doc['metadata']['name']}"] = str(cluster[1].get("rayVersion", "missing"))
    return found


def check_all(root: Path, crd_dir: Path) -> dict[str, list[str]]:
    """{place: [errors]} over every manifest, Serve config and version statement."""
    crds = crd_schemas(crd_dir)
    report: dict[str, list[str]] = {}
    every = []
    for path in sorted((root / "k8s").glob("*.yaml")):
        for i, doc in enumerate(load_docs(path)):
            every.append(doc)
            report[f"k8s/{path.name}#{i}:{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"] = \
                validate_doc(doc, crds) + check_hardening(doc) + check_service_resilience(doc) + check_ray_auth(doc)
    report["k8s network"] = check_network(every)
    report["k8s front door"] = check_front_door(every)
    for path in sorted((root / "deployments").glob("*.yaml")):
        report[f"deployments/{path.name}"] = check_serve_config(yaml.safe_load(path.read_text()))
    versions = ray_versions(root)
    expected = versions["pyproject.toml"]
    report["ray versions"] = [f"{where}: Ray {v}, but pyproject.toml pins {expected}"
                              for where, v in versions.items() if v != expected]
    return report
