#!/usr/bin/env python3
"""`make k8s-check`: the Kubernetes manifests in deploy/kubernetes/ are valid and keep their
promises. Run by scripts/k8s-check.sh inside its venv (PyYAML and kubernetes-validate).

1. Every kustomization (each directory with a kustomization.yaml) is rendered by
   scripts/k8s_render.py; where `kubectl` is installed, `kubectl kustomize` must render the
   same objects. Every YAML file must be reached by a render or be a `*.example.yaml`.
2. The rendered objects and the examples are validated offline against the Kubernetes API
   schemas with `kubernetes-validate --strict` (unknown fields, wrong types and unknown kinds
   fail) for the oldest and the newest supported Kubernetes version.
3. Policy: every pod runs non-root with a read-only root filesystem, no privilege escalation,
   all capabilities dropped, the RuntimeDefault seccomp profile and no service-account token;
   every long-running container has liveness and readiness probes, CPU and memory requests, a
   memory limit and an image pinned by tag or digest. toolwire containers probe /healthz and
   /readyz (or `toolwire health` on loopback), mount tools.d as a whole ConfigMap (a subPath
   never updates), have an emptyDir /tmp, require a token unless they listen on loopback, and
   their pod's terminationGracePeriodSeconds covers preStop sleep + drain + cancel grace.
   Services, PodDisruptionBudgets and HPAs point at something that exists; every Secret a
   manifest needs is described by a `*.example.yaml`.
4. The config and tool files a toolwire container will read (its ConfigMaps, its args and its
   env as the image sets them) pass `toolwire check` with the binary in TOOLWIRE_BIN.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path, PurePosixPath

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from k8s_render import RenderError, identity, load_documents, render  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy" / "kubernetes"
OUT = REPO / ".cache" / "k8s" / "rendered"
# The oldest version the manifests need (native sidecars, preStop `sleep`) and the newest the
# validator bundles.
K8S_VERSIONS = os.environ.get("K8S_VERSIONS", "1.30.0 1.37.0").split()
# Mirrors src/server.rs CANCEL_GRACE: after the drain, cancelled calls get this long to answer.
CANCEL_GRACE_S = 5.0
WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet"}

failures: list[str] = []


def fail(where: str, msg: str) -> None:
    failures.append(f"{where}: {msg}")


# ---------------------------------------------------------------------------------------------
# What the image and the embedded defaults decide (read from the repository, not repeated here).


def dockerfile_facts() -> dict:
    text = (REPO / "Dockerfile").read_text(encoding="utf-8")
    base = text.split(" AS runtime-prebuilt", 1)[0]
    env = dict(re.findall(r"^ENV (TOOLWIRE_[A-Z_]+)=(\S+)", base, re.M))
    workdir = re.findall(r"^WORKDIR (\S+)", base, re.M)[-1]
    cmd = yaml.safe_load(re.findall(r"^CMD (\[.*\])", base, re.M)[-1])
    copies = dict((dst, src) for src, dst in re.findall(r"^COPY (\S+) (\S+)", base, re.M))
    return {"env": env, "workdir": workdir, "cmd": cmd, "copies": copies}


IMAGE = dockerfile_facts()
DEFAULTS = tomllib.loads((REPO / "config" / "toolwire.toml").read_text(encoding="utf-8"))


def seconds(duration: str) -> float:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)\s*", duration)
    if not m:
        raise ValueError(f"not a duration: {duration!r}")
    return float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[m.group(2)]


# ---------------------------------------------------------------------------------------------
# 1. Render.


def roots() -> list[Path]:
    return sorted(p.parent for p in DEPLOY.rglob("kustomization.yaml"))


def referenced_files(root: Path) -> set[Path]:
    """kustomization.yaml files and resource files a render of `root` reads."""
    k = yaml.safe_load((root / "kustomization.yaml").read_text(encoding="utf-8")) or {}
    files = {(root / "kustomization.yaml").resolve()}
    for entry in k.get("resources", []):
        p = (root / entry).resolve()
        files |= referenced_files(p) if p.is_dir() else {p}
    return files


def kubectl_objects(root: Path) -> list[dict] | None:
    if os.environ.get("K8S_CHECK_KUBECTL", "1") == "0" or not shutil.which("kubectl"):
        return None
    out = subprocess.run(
        ["kubectl", "kustomize", str(root)], capture_output=True, text=True, timeout=120
    )
    if out.returncode != 0:
        fail(rel(root), f"kubectl kustomize failed:\n{out.stderr}")
        return []
    return [d for d in yaml.safe_load_all(out.stdout) if d is not None]


def rel(p: Path) -> str:
    return str(p.relative_to(REPO))


# ---------------------------------------------------------------------------------------------
# 2. Schemas.


def validate(files: list[Path]) -> None:
    for version in K8S_VERSIONS:
        cmd = ["kubernetes-validate", "--strict", "-k", version, *map(str, files)]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        lines = (out.stdout + out.stderr).splitlines()
        bad = [l for l in lines if not l.startswith("INFO ")]
        if out.returncode != 0 or bad:
            fail(f"kubernetes-validate --strict -k {version}", "\n  " + "\n  ".join(bad or lines))
        else:
            print(f"k8s-check: {len(lines)} objects valid against Kubernetes {version} (--strict)")


# ---------------------------------------------------------------------------------------------
# 3. Policy.


def pod_spec(o: dict) -> dict:
    return o["spec"]["template"]["spec"]


def is_toolwire(c: dict) -> bool:
    return c["name"] == "toolwire" or image_name(c.get("image", "")) == "toolwire"


def image_name(image: str) -> str:
    last = image.split("@")[0].rsplit("/", 1)[-1]
    return last.split(":")[0]


def image_pinned(image: str) -> bool:
    if "@sha256:" in image:
        return True
    last = image.rsplit("/", 1)[-1]
    return ":" in last and last.rsplit(":", 1)[1] not in ("", "latest")


def long_running(spec: dict) -> list[dict]:
    """App containers and native sidecars (init containers with restartPolicy Always)."""
    sidecars = [c for c in spec.get("initContainers", []) if c.get("restartPolicy") == "Always"]
    return sidecars + spec.get("containers", [])


def check_pod(where: str, spec: dict) -> None:
    psc = spec.get("securityContext") or {}
    if spec.get("automountServiceAccountToken") is not False:
        fail(where, "automountServiceAccountToken must be false")
    for c in spec.get("initContainers", []) + spec.get("containers", []):
        cw = f"{where} container {c['name']}"
        sc = c.get("securityContext") or {}
        if not (sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is True):
            fail(cw, "runAsNonRoot must be true")
        if sc.get("runAsUser", psc.get("runAsUser")) == 0:
            fail(cw, "runAsUser must not be 0")
        if sc.get("readOnlyRootFilesystem") is not True:
            fail(cw, "readOnlyRootFilesystem must be true")
        if sc.get("allowPrivilegeEscalation") is not False:
            fail(cw, "allowPrivilegeEscalation must be false")
        if sc.get("privileged"):
            fail(cw, "must not be privileged")
        if "ALL" not in ((sc.get("capabilities") or {}).get("drop") or []):
            fail(cw, "capabilities must drop ALL")
        if (sc.get("capabilities") or {}).get("add"):
            fail(cw, "must not add capabilities")
        seccomp = (sc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            fail(cw, "seccompProfile must be RuntimeDefault")
        if not image_pinned(c.get("image", "")):
            fail(cw, f"image {c.get('image')!r} must be pinned by a tag (not latest) or a digest")
        res = c.get("resources") or {}
        for part, key in (("requests", "cpu"), ("requests", "memory"), ("limits", "memory")):
            if key not in (res.get(part) or {}):
                fail(cw, f"resources.{part}.{key} must be set")
    for c in long_running(spec):
        for probe in ("livenessProbe", "readinessProbe"):
            if probe not in c:
                fail(f"{where} container {c['name']}", f"{probe} missing")


def toolwire_probes(cw: str, c: dict) -> None:
    def ok(probe: dict | None, path: str) -> bool:
        if not probe:
            return False
        if "httpGet" in probe:
            return probe["httpGet"].get("path") == path
        return (probe.get("exec") or {}).get("command", [])[:2] == ["toolwire", "health"]

    if not ok(c.get("livenessProbe"), "/healthz"):
        fail(cw, "livenessProbe must GET /healthz (or run `toolwire health`)")
    if not ok(c.get("readinessProbe"), "/readyz"):
        fail(cw, "readinessProbe must GET /readyz (or run `toolwire health`)")
    ports = {p.get("name") for p in c.get("ports", [])} | {p["containerPort"] for p in c.get("ports", [])}
    for name in ("livenessProbe", "readinessProbe", "startupProbe"):
        get = (c.get(name) or {}).get("httpGet")
        if get and get.get("port") not in ports:
            fail(cw, f"{name} port {get.get('port')!r} is not a port of the container")


def mount_for(c: dict, spec: dict, path: str) -> tuple[dict, dict, str] | None:
    """(volumeMount, volume, path inside the volume) of the mount that holds `path`."""
    best = None
    for m in c.get("volumeMounts", []):
        mp = m["mountPath"].rstrip("/")
        if path == mp or path.startswith(mp + "/"):
            if best is None or len(mp) > len(best[0]["mountPath"].rstrip("/")):
                inner = path[len(mp) :].lstrip("/")
                vol = next(v for v in spec.get("volumes", []) if v["name"] == m["name"])
                best = (m, vol, inner)
    return best


def effective(c: dict) -> dict:
    """What the toolwire process of container `c` will read: args, config file, env."""
    args = c.get("args", IMAGE["cmd"]) if "command" not in c else c["command"][1:] + c.get("args", [])
    env = dict(IMAGE["env"])
    secret_env = {}
    for e in c.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
        elif ref := (e.get("valueFrom") or {}).get("secretKeyRef"):
            secret_env[e["name"]] = (ref["name"], ref["key"])
    config = None
    if "--config" in args:
        config = args[args.index("--config") + 1]
    return {"args": args, "env": env, "secret_env": secret_env, "config": config}


def config_text(cw: str, c: dict, spec: dict, objects: dict, path: str) -> str | None:
    found = mount_for(c, spec, path)
    if found is None:
        src = IMAGE["copies"].get(path)
        if src is None:
            fail(cw, f"--config {path}: neither mounted nor in the image")
            return None
        return (REPO / src).read_text(encoding="utf-8")
    m, vol, inner = found
    if "configMap" not in vol:
        fail(cw, f"--config {path}: only ConfigMap volumes are checked")
        return None
    key = m.get("subPath") or inner
    cm = objects.get(("v1", "ConfigMap", vol["configMap"]["name"]))
    if cm is None or key not in (cm.get("data") or {}):
        fail(cw, f"--config {path}: ConfigMap {vol['configMap']['name']} has no key {key!r}")
        return None
    return cm["data"][key]


def lookup(table: dict, dotted: str):
    for part in dotted.split("."):
        if not isinstance(table, dict) or part not in table:
            return None
        table = table[part]
    return table


def setting(eff: dict, cfg: dict, dotted: str):
    """Env (TOOLWIRE_A__B) over the config file over the embedded default."""
    env = "TOOLWIRE_" + dotted.upper().replace(".", "__")
    if env in eff["env"]:
        return eff["env"][env]
    value = lookup(cfg, dotted)
    return value if value is not None else lookup(DEFAULTS, dotted)


def check_toolwire(where: str, o: dict, c: dict, objects: dict, checks: list) -> None:
    cw = f"{where} container {c['name']}"
    spec = pod_spec(o)
    toolwire_probes(cw, c)
    eff = effective(c)
    cfg_text = config_text(cw, c, spec, objects, eff["config"]) if eff["config"] else ""
    if cfg_text is None:
        return
    try:
        cfg = tomllib.loads(cfg_text)
    except tomllib.TOMLDecodeError as e:
        fail(cw, f"config {eff['config']}: {e}")
        return

    # tools.d: a whole ConfigMap at the directory the server reads (relative to WORKDIR).
    tools_dir = str(PurePosixPath(IMAGE["workdir"]) / setting(eff, cfg, "tools_dir"))
    found = mount_for(c, spec, tools_dir)
    tools_cm = None
    if found is None or found[2] != "" or "configMap" not in found[1]:
        fail(cw, f"tools_dir {tools_dir} must be a ConfigMap volume mounted at that path")
    elif found[0].get("subPath"):
        fail(cw, f"{tools_dir}: a subPath mount never sees ConfigMap updates (no hot reload)")
    else:
        tools_cm = objects.get(("v1", "ConfigMap", found[1]["configMap"]["name"]))
        if tools_cm is None:
            fail(cw, f"ConfigMap {found[1]['configMap']['name']} (tools.d) is not in this render")
    tmp = mount_for(c, spec, "/tmp")
    if tmp is None or "emptyDir" not in tmp[1]:
        fail(cw, "/tmp must be an emptyDir (the root filesystem is read-only)")

    # Auth: off is allowed on loopback only; the server refuses to start otherwise.
    listen = str(setting(eff, cfg, "listen"))
    tokens = setting(eff, cfg, "auth.tokens") or []
    loopback = listen.startswith("127.") or listen.startswith("[::1]")
    if not loopback and not tokens and not setting(eff, cfg, "auth.allow_unauthenticated"):
        fail(cw, f"listens on {listen} without [auth] tokens: the server would not start")

    # Termination grace covers preStop sleep + drain + cancel grace.
    drain = seconds(str(setting(eff, cfg, "shutdown.drain")))
    pre = ((c.get("lifecycle") or {}).get("preStop") or {})
    pre_sleep = (pre.get("sleep") or {}).get("seconds", 0)
    if "exec" in pre and pre["exec"].get("command", [""])[0] == "sleep":
        pre_sleep = float(pre["exec"]["command"][1])
    grace = spec.get("terminationGracePeriodSeconds", 30)
    need = pre_sleep + drain + CANCEL_GRACE_S
    if grace < need:
        fail(where, f"terminationGracePeriodSeconds {grace} < preStop {pre_sleep}s + drain "
                    f"{drain}s + cancel grace {CANCEL_GRACE_S}s = {need}s")
    checks.append((cw, eff, cfg_text, tools_cm))


def selects(selector: dict, labels: dict) -> bool:
    want = selector.get("matchLabels", selector)
    return bool(want) and all(labels.get(k) == v for k, v in want.items())


def check_references(where: str, objs: list[dict], examples: dict) -> None:
    by_id = {identity(o): o for o in objs}
    pods = [(o, o["spec"]["template"]) for o in objs if o["kind"] in WORKLOADS]
    for o in objs:
        ow = f"{where} {o['kind']}/{o['metadata']['name']}"
        if o["kind"] == "Service":
            hits = [w for w, t in pods if selects(o["spec"]["selector"], t["metadata"]["labels"])]
            if not hits:
                fail(ow, "selects no pod of this render")
            for p in o["spec"]["ports"]:
                tp = p.get("targetPort", p["port"])
                names = {
                    x
                    for w in hits
                    for c in long_running(pod_spec(w))
                    for port in c.get("ports", [])
                    for x in (port.get("name"), port["containerPort"])
                }
                if tp not in names:
                    fail(ow, f"targetPort {tp!r} is no container port of the selected pods")
        if o["kind"] == "PodDisruptionBudget":
            # The schema allows both; the API server rejects it.
            if ("minAvailable" in o["spec"]) == ("maxUnavailable" in o["spec"]):
                fail(ow, "set exactly one of minAvailable and maxUnavailable")
            if not any(selects(o["spec"]["selector"], t["metadata"]["labels"]) for _, t in pods):
                fail(ow, "selects no pod of this render")
        if o["kind"] == "NetworkPolicy":
            if not any(selects(o["spec"]["podSelector"], t["metadata"]["labels"]) for _, t in pods):
                fail(ow, "selects no pod of this render")
        if o["kind"] == "HorizontalPodAutoscaler":
            ref = o["spec"]["scaleTargetRef"]
            target = by_id.get((ref["apiVersion"], ref["kind"], ref["name"]))
            if target is None:
                fail(ow, f"scaleTargetRef {ref['kind']}/{ref['name']} is not in this render")
            elif "replicas" in target["spec"]:
                fail(ow, f"{ref['name']} sets spec.replicas: every apply would undo the HPA")
    for w, t in pods:
        spec = t["spec"]
        ww = f"{where} {w['kind']}/{w['metadata']['name']}"
        if not selects(w["spec"]["selector"], t["metadata"]["labels"]):
            fail(ww, "selector does not match the pod template's labels")
        for v in spec.get("volumes", []):
            if "configMap" in v and ("v1", "ConfigMap", v["configMap"]["name"]) not in by_id:
                fail(ww, f"ConfigMap {v['configMap']['name']} is not in this render")
            secret = v.get("secret")
            if secret and not secret.get("optional") and secret["secretName"] not in examples:
                fail(ww, f"Secret {secret['secretName']} (volume) has no *.example.yaml")
        for c in spec.get("initContainers", []) + spec.get("containers", []):
            for e in c.get("env", []):
                ref = (e.get("valueFrom") or {}).get("secretKeyRef")
                if ref and not ref.get("optional"):
                    keys = examples.get(ref["name"])
                    if keys is None or ref["key"] not in keys:
                        fail(ww, f"Secret {ref['name']} key {ref['key']} has no *.example.yaml")


# ---------------------------------------------------------------------------------------------
# 4. toolwire check on the files the container will read.


def toolwire_check(
    where: str, eff: dict, cfg_text: str, tools_cm: dict | None, binary: str, examples: dict
) -> None:
    with tempfile.TemporaryDirectory(prefix="k8s-check-") as tmp:
        tools = Path(tmp) / "tools.d"
        tools.mkdir()
        for key, text in ((tools_cm or {}).get("data") or {}).items():
            (tools / key).write_text(text, encoding="utf-8")
        args = ["check", "--tools-dir", str(tools)]
        if eff["config"]:
            cfg = Path(tmp) / "toolwire.toml"
            cfg.write_text(cfg_text, encoding="utf-8")
            args += ["--config", str(cfg)]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **eff["env"]}
        # Secrets are not in the repository: their values from the *.example.yaml files.
        for name, (secret, key) in eff["secret_env"].items():
            if key in examples.get(secret, {}):
                env[name] = examples[secret][key]
        env.pop("TOOLWIRE_TOOLS_DIR", None)
        # The repository root stands in for /etc/toolwire (examples/tools/ is copied there).
        out = subprocess.run(
            [binary, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
        )
        if out.returncode != 0:
            fail(where, f"toolwire {shlex.join(args)} failed:\n{out.stdout}{out.stderr}")
        else:
            summary = out.stdout.strip().splitlines()[-1]
            print(f"k8s-check: toolwire check of {where}: {summary}")


# ---------------------------------------------------------------------------------------------


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for old in OUT.glob("*.yaml"):
        old.unlink()
    rendered: dict[str, list[dict]] = {}
    used: set[Path] = set()
    for root in roots():
        name = rel(root).removeprefix("deploy/kubernetes/")
        try:
            objs = render(root)
        except (RenderError, yaml.YAMLError) as e:
            fail(name, str(e))
            continue
        used |= referenced_files(root)
        real = kubectl_objects(root)
        if real is not None:
            mine = {identity(o): o for o in objs}
            theirs = {identity(o): o for o in real}
            if mine != theirs:
                diff = sorted(set(mine) ^ set(theirs)) or [k for k in mine if mine[k] != theirs[k]]
                fail(name, f"scripts/k8s_render.py and kubectl kustomize differ on {diff}")
            else:
                print(f"k8s-check: {name}: kubectl kustomize renders the same {len(objs)} objects")
        rendered[name] = objs
        (OUT / (name.replace("/", "_") + ".yaml")).write_text(
            yaml.safe_dump_all(objs, sort_keys=False), encoding="utf-8"
        )

    examples_files = sorted(DEPLOY.rglob("*.example.yaml"))
    examples: dict[str, dict[str, str]] = {}
    for f in examples_files:
        for d in load_documents(f):
            if d["kind"] == "Secret":
                examples.setdefault(d["metadata"]["name"], {}).update(d.get("stringData") or {})
                for k in d.get("data") or {}:
                    fail(rel(f), f"write {k} under stringData (the check reads plain values)")
    for f in sorted(DEPLOY.rglob("*.y*ml")):
        if f.resolve() not in used and f not in examples_files:
            fail(rel(f), "not reached by any kustomization and not a *.example.yaml: unchecked")

    validate(sorted(OUT.glob("*.yaml")) + examples_files)

    binary = os.environ.get("TOOLWIRE_BIN", "")
    toolwire_checks = []
    for name, objs in rendered.items():
        by_id = {identity(o): o for o in objs}
        check_references(name, objs, examples)
        for o in objs:
            if o["kind"] not in WORKLOADS:
                continue
            where = f"{name} {o['kind']}/{o['metadata']['name']}"
            check_pod(where, pod_spec(o))
            for c in long_running(pod_spec(o)):
                if is_toolwire(c):
                    check_toolwire(where, o, c, by_id, toolwire_checks)
    if not toolwire_checks:
        fail("deploy/kubernetes", "no toolwire container found")
    if binary and Path(binary).is_file():
        for where, eff, cfg_text, tools_cm in toolwire_checks:
            toolwire_check(where, eff, cfg_text, tools_cm, binary, examples)
    else:
        fail("TOOLWIRE_BIN", f"{binary!r} is not a toolwire binary (make k8s-check builds one)")

    if failures:
        print(f"\nk8s-check: FAILED ({len(failures)} problems):", file=sys.stderr)
        for f in failures:
            print(f"  - {f}", file=sys.stderr)
        return 1
    print(
        f"k8s-check: OK: {len(rendered)} kustomizations ({', '.join(rendered)}), "
        f"{len(examples_files)} examples, {len(toolwire_checks)} toolwire containers; "
        f"rendered manifests in {rel(OUT)}/"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
