"""The KubeRay manifests and Serve configs, validated statically (no cluster exists here)."""

import copy
import os
from pathlib import Path

import pytest
import yaml

from jeirt_ray.serving.deployment.manifests import (check_all, check_front_door, check_hardening, check_network, check_ray_auth,
                                         check_serve_config,
                                         check_service_resilience, crd_schemas, load_docs, pod_specs, ray_versions,
                                         validate_doc)

from .conftest import missing

ROOT = Path(__file__).resolve().parents[1]
CRDS = Path(os.environ.get("JEIRT_KUBERAY_CRDS", ROOT / ".." / "shared" / "kuberay-crds"))


@pytest.fixture(scope="module")
def crds():
    if not (CRDS / "ray.io_rayservices.yaml").exists():
        missing(f"KubeRay CRDs not found at {CRDS.resolve()} (set JEIRT_KUBERAY_CRDS to the folder "
                f"of ray.io_*.yaml from the KubeRay v1.7.0 release)")
    return crd_schemas(CRDS)


def _doc(name):
    return load_docs(ROOT / "k8s" / name)[0]


def test_every_manifest_and_serve_config_validates(crds):
    report = check_all(ROOT, CRDS)
    assert {k for k in report if k.startswith("k8s/ray-")} >= {
        "k8s/ray-job.encode.yaml#0:RayJob/jeirt-encode", "k8s/ray-job.train.yaml#0:RayJob/jeirt-train",
        "k8s/ray-job.tune.yaml#0:RayJob/jeirt-tune", "k8s/ray-service.router.yaml#0:RayService/jeirt-router",
        "k8s/ray-cluster.dev.yaml#0:RayCluster/jeirt-dev", "k8s/ray-cronjob.learn.yaml#0:RayCronJob/jeirt-learn"}
    assert {k: v for k, v in report.items() if v} == {}


def test_the_nightly_learning_job_is_checked_as_any_ray_manifest(crds):
    """The RayCronJob's Ray cluster sits under spec.jobTemplate: its schema, its pods' hardening and
    its Ray version are checked there."""
    doc = _doc("ray-cronjob.learn.yaml")
    assert "jeirt learn --space models:/jeirt-router@champion" in doc["spec"]["jobTemplate"]["entrypoint"]
    bad = copy.deepcopy(doc)
    bad["spec"]["jobTemplate"]["shutdownAfterJobFinish"] = True  # typo
    assert any("shutdownAfterJobFinish" in e for e in validate_doc(bad, crds))
    head = bad["spec"]["jobTemplate"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    head["securityContext"]["runAsNonRoot"] = False
    assert check_hardening(bad) == ["spec.jobTemplate.rayClusterSpec.headGroupSpec.template.spec.securityContext."
                                    "runAsNonRoot: must be true"]


def test_ray_service_serves_the_production_config():
    service = _doc("ray-service.router.yaml")
    production = yaml.safe_load((ROOT / "deployments" / "production.yaml").read_text())
    assert yaml.safe_load(service["spec"]["serveConfigV2"]) == production


def test_a_wrong_field_in_a_ray_service_fails(crds):
    doc = _doc("ray-service.router.yaml")
    bad = copy.deepcopy(doc)
    bad["spec"]["rayClusterConfig"]["headGroupSpec"]["rayStartParam"] = {}  # typo of rayStartParams
    assert any("rayStartParam" in e for e in validate_doc(bad, crds))
    bad = copy.deepcopy(doc)
    bad["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["replicas"] = "two"
    assert any("replicas" in e for e in validate_doc(bad, crds))
    bad = copy.deepcopy(doc)
    serve = yaml.safe_load(bad["spec"]["serveConfigV2"])
    serve["applications"][0]["deployments"][0]["num_replica"] = 2
    bad["spec"]["serveConfigV2"] = yaml.safe_dump(serve)
    assert any("num_replica: unknown key" in e for e in validate_doc(bad, crds))


def test_a_wrong_field_in_a_core_kind_fails(crds):
    doc = load_docs(ROOT / "k8s" / "mlflow.yaml")[3]
    assert doc["kind"] == "Deployment" and validate_doc(doc, crds) == []
    doc["spec"]["replica"] = 1
    assert validate_doc(doc, crds)


def test_serve_config_unknown_keys_and_bad_values():
    raw = yaml.safe_load((ROOT / "deployments" / "local.yaml").read_text())
    assert check_serve_config(raw) == []
    raw["applications"][0]["deployments"][0]["ray_actor_options"]["num_gpu"] = 1
    assert check_serve_config(raw) == [
        "applications[0].deployments[0].ray_actor_options.num_gpu: unknown key (not in RayActorOptionsSchema)"]
    raw = yaml.safe_load((ROOT / "deployments" / "production.yaml").read_text())
    raw["applications"][0]["deployments"][0]["autoscaling_config"]["min_replicas"] = -1
    assert check_serve_config(raw)
    # this project's own args and user_config are typed: a typo is named (Serve would ignore it)
    raw = yaml.safe_load((ROOT / "deployments" / "local.yaml").read_text())
    raw["applications"][0]["deployments"][0]["user_config"]["upstream"] = {"x": "http://127.0.0.1:1/v1"}
    raw["applications"][0]["args"]["encoder_thread"] = 2
    assert check_serve_config(raw) == ["application 'jeirt' args.encoder_thread: Extra inputs are not permitted"]
    del raw["applications"][0]["args"]["encoder_thread"]
    assert check_serve_config(raw) == [
        "application 'jeirt' deployment Router user_config.upstream: Extra inputs are not permitted"]
    del raw["applications"][0]["deployments"][0]["user_config"]["upstream"]
    raw["applications"][0]["deployments"][0]["user_config"]["encoder_batch_wait_s"] = 5
    assert check_serve_config(raw) == ["application 'jeirt' deployment Router user_config.encoder_batch_wait_s: "
                                       "Input should be less than or equal to 1"]
    # numbers that are not finite, an upstream without a scheme, a price file that is not there, an
    # empty log path: each one line before anything starts (each used to start and fail later)
    for edit, message in (({"learning": {"enabled": True, "prior_var": float("inf")}}, "learning.prior_var: Input "
                           "should be a finite number"),
                          ({"upstreams": {"a": "127.0.0.1:8001/v1"}}, "upstreams: Value error, upstream of 'a': "
                           "'127.0.0.1:8001/v1' is not an http:// or https:// URL"),
                          ({"prices": "/no/such/prices.csv"}, "prices: Value error, the price table "
                           "'/no/such/prices.csv' does not exist"),
                          ({"decisions": {"path": ""}}, "decisions.path: String should have at least 1 character")):
        raw = yaml.safe_load((ROOT / "deployments" / "local.yaml").read_text())
        raw["applications"][0]["deployments"][0]["user_config"].update(edit)
        problems = check_serve_config(raw)
        assert len(problems) == 1 and message in problems[0], (edit, problems)
    raw = yaml.safe_load((ROOT / "deployments" / "production.yaml").read_text())
    encoder = next(d for d in raw["applications"][0]["deployments"] if d["name"] == "Encoder")
    encoder["user_config"] = {"batch_wait_s": 0.005}
    assert check_serve_config(raw) == []
    encoder["user_config"] = {"batch_wait": 0.005}
    assert check_serve_config(raw) == [
        "application 'jeirt' deployment Encoder user_config.batch_wait: Extra inputs are not permitted"]


def test_ray_versions_agree_and_a_mismatch_is_caught(tmp_path):
    versions = ray_versions(ROOT)
    assert set(versions.values()) == {"2.60.0"} and len(versions) >= 7
    for sub in ("k8s", "deployments"):
        (tmp_path / sub).mkdir()
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    (tmp_path / "k8s" / "Containerfile").write_text((ROOT / "k8s" / "Containerfile").read_text())
    text = (ROOT / "k8s" / "ray-job.train.yaml").read_text().replace('rayVersion: "2.60.0"', 'rayVersion: "2.59.0"')
    (tmp_path / "k8s" / "ray-job.train.yaml").write_text(text)
    if (CRDS / "ray.io_rayjobs.yaml").exists():
        report = check_all(tmp_path, CRDS)
        assert report["ray versions"] == ["k8s/ray-job.train.yaml:jeirt-train: Ray 2.59.0, but pyproject.toml pins 2.60.0"]
    assert ray_versions(tmp_path)["k8s/ray-job.train.yaml:jeirt-train"] == "2.59.0"


def test_every_pod_is_hardened_and_a_regression_is_caught():
    pods = 0
    for path in sorted((ROOT / "k8s").glob("*.yaml")):
        for doc in load_docs(path):
            assert check_hardening(doc) == [], (path.name, check_hardening(doc))
            pods += len(pod_specs(doc))
    assert pods >= 12  # every head and worker group of the Ray manifests, MLflow and its database
    doc = _doc("ray-service.router.yaml")
    head = doc["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]
    del head["containers"][0]["securityContext"]["readOnlyRootFilesystem"]
    head["securityContext"]["runAsNonRoot"] = False
    head["containers"][0]["volumeMounts"] = [m for m in head["containers"][0]["volumeMounts"] if m["mountPath"] != "/tmp"]
    errors = check_hardening(doc)
    assert any("readOnlyRootFilesystem" in e for e in errors) and any("runAsNonRoot" in e for e in errors)
    assert any("emptyDir mounted at /tmp" in e for e in errors)


def test_the_service_keeps_what_the_cluster_tests_showed():
    """GCS fault tolerance on the Redis of k8s/redis.yaml, the autoscaler, Routers spread over nodes."""
    doc = _doc("ray-service.router.yaml")
    assert check_service_resilience(doc) == []
    cluster = doc["spec"]["rayClusterConfig"]
    host = cluster["gcsFaultToleranceOptions"]["redisAddress"].split(":")[0]
    redis = {(d["kind"], d["metadata"]["name"]) for d in load_docs(ROOT / "k8s" / "redis.yaml")}
    assert host == "redis.jeirt.svc.cluster.local" and {("Service", "redis"), ("StatefulSet", "redis")} <= redis
    secret = cluster["gcsFaultToleranceOptions"]["redisPassword"]["valueFrom"]["secretKeyRef"]
    assert secret == {"name": "jeirt-redis", "key": "password"}
    assert "jeirt-redis" in (ROOT / "k8s" / "README.md").read_text()

    def broken(edit):
        bad = copy.deepcopy(doc)
        edit(bad["spec"]["rayClusterConfig"], bad)
        return check_service_resilience(bad)

    assert any("gcsFaultToleranceOptions.redisAddress: missing" in e
               for e in broken(lambda c, d: c.pop("gcsFaultToleranceOptions")))
    assert any("enableInTreeAutoscaling: must be true" in e
               for e in broken(lambda c, d: c.update(enableInTreeAutoscaling=False)))
    assert any("idleTimeoutSeconds: missing" in e for e in broken(lambda c, d: c["autoscalerOptions"].clear()))
    assert any("workerGroupSpecs[0](cpu): minReplicas < maxReplicas" in e
               for e in broken(lambda c, d: c["workerGroupSpecs"][0].update(maxReplicas=2)))

    def serve_edit(fn):
        def edit(cluster, bad):
            serve = yaml.safe_load(bad["spec"]["serveConfigV2"])
            fn({d["name"]: d for d in serve["applications"][0]["deployments"]})
            bad["spec"]["serveConfigV2"] = yaml.safe_dump(serve)
        return edit

    assert broken(serve_edit(lambda d: d["Router"].pop("max_replicas_per_node"))) == [
        "serveConfigV2 jeirt/Router: 2 replicas or more but no max_replicas_per_node "
        "(they may share one node and fail together)"]
    assert broken(serve_edit(lambda d: d["Router"]["autoscaling_config"].update(max_replicas=99))) == [
        "serveConfigV2 jeirt/Router: max 99 replicas, 1 per node, but the worker groups reach 24 nodes"]


def test_every_serve_pod_has_haproxy_in_front_and_a_regression_is_caught():
    """The RayService's pods read the settings that `jeirt serve --ingress haproxy` gives a local
    Ray (HAProxy, the replica's code on the loop that writes its answers, the header buffer)."""
    from jeirt_ray.serving.deployment.ingress import HAPROXY_ENV, ingress_env
    docs = load_docs(ROOT / "k8s" / "configmap.yaml") + load_docs(ROOT / "k8s" / "ray-service.router.yaml")
    assert check_front_door(docs) == []
    assert HAPROXY_ENV.items() <= ingress_env("haproxy").items()
    worker_off = copy.deepcopy(docs)
    group = worker_off[-1]["spec"]["rayClusterConfig"]["workerGroupSpecs"][1]["template"]["spec"]["containers"][0]
    group["envFrom"] = [e for e in group["envFrom"] if e.get("configMapRef", {}).get("name") != "jeirt-serve"]
    assert len(check_front_door(worker_off)) == 1 and "workerGroupSpecs[1]" in check_front_door(worker_off)[0]
    threaded = copy.deepcopy(docs)
    next(d for d in threaded if d["metadata"]["name"] == "jeirt-serve")["data"][
        "RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD"] = "1"
    assert len(check_front_door(threaded)) == 3  # the head and both worker groups


def test_rays_own_ports_are_private_and_token_authenticated_and_a_regression_is_caught(crds):
    """The NetworkPolicy opens only Serve's port to every source; every Ray cluster spec turns
    Ray's token authentication on. Opening the dashboard, or dropping the policy or the token, fails."""
    docs = [d for path in sorted((ROOT / "k8s").glob("*.yaml")) for d in load_docs(path)]
    assert check_network(docs) == []
    rays = [d for d in docs if d.get("kind") in ("RayCluster", "RayJob", "RayService")]
    assert len(rays) == 5 and all(check_ray_auth(d) == [] for d in rays)
    policy = copy.deepcopy(next(d for d in docs if d.get("kind") == "NetworkPolicy"))
    policy["spec"]["ingress"][-1]["ports"].append({"port": 8265, "protocol": "TCP"})
    assert any("opens 8265 to every source" in e for e in check_network([policy]))
    policy["spec"]["ingress"].append({})
    assert any("opens every port" in e for e in check_network([policy]))
    assert "no NetworkPolicy selects the Ray pods" in check_network([d for d in docs if d.get("kind") != "NetworkPolicy"])[0]
    service = copy.deepcopy(_doc("ray-service.router.yaml"))
    service["spec"]["rayClusterConfig"]["authOptions"]["mode"] = "disabled"
    assert "authOptions.mode: must be token" in check_ray_auth(service)[0]
    assert validate_doc(next(d for d in docs if d.get("kind") == "NetworkPolicy"), crds) == []
