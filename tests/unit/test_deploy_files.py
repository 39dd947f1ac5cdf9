"""The deploy files (deploy/systemd, deploy/kubernetes) are what the docs
(docs/operations/) tell operators to copy: systemd accepts the unit, the server's own
config parser accepts both configs (every directive known, every value valid), a node
starts with the systemd config, the Kubernetes manifest agrees with its config:
ports, paths, peer names, and the probe script, run here against a real node; and the
monitoring page's alert rules pass promtool and name only series a node serves."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from support import DisqProcess, cluster_nodes, free_port, myid, wait_for

from disq import tls
from disq.config import Config
from disq.exposure import check_metrics
from disq.server.commands import load_commands

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
UNIT = DEPLOY / "systemd" / "disq.service"
SYSTEMD_CONF = DEPLOY / "systemd" / "disq.conf"
MANIFEST = DEPLOY / "kubernetes" / "disq.yaml"
SECRETS_TEXT = "cluster-secret 0123456789abcdef\nrequirepass test-password\n"
BUS_PORT_OFFSET = 10000


def with_secrets(config_text: str, secrets: Path) -> str:
    """The config with its `include` of the secrets file pointed at a test copy (the
    real one is /etc/disq/secrets.conf or the Kubernetes Secret, absent here)."""
    secrets.write_text(SECRETS_TEXT)
    lines = []
    for line in config_text.splitlines():
        words = line.split()
        lines.append(f"include {secrets}" if words[:1] == ["include"] else line)
    return "\n".join(lines) + "\n"


def parse_config(config_text: str, tmp_path: Path) -> Config:
    """What disq-server does with a config file before it starts (disq/__main__.py):
    raises ConfigError on an unknown directive or a bad value."""
    conf = tmp_path / "disq.conf"
    conf.write_text(with_secrets(config_text, tmp_path / "secrets.conf"))
    config = Config()
    config.command_names = set(load_commands())
    config.load_file(str(conf))
    tls.prepare(config)
    assert check_metrics(config) is None
    return config


# -- systemd ------------------------------------------------------------------------------
def test_systemd_analyze_verify_accepts_the_unit(tmp_path: Path) -> None:
    """`systemd-analyze verify` checks that ExecStart's program exists, so the unit is
    verified as a copy whose ExecStart is this environment's disq-server (the shipped
    one says /opt/disq/bin/disq-server); every other line is verified as shipped. Its
    warnings (an unknown key, a bad value) go to stderr with exit status 0: none may
    name the unit."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    server = Path(sys.executable).parent / "disq-server"
    if not server.exists():
        pytest.skip(f"no disq-server beside {sys.executable}")
    text = UNIT.read_text()
    shipped = "ExecStart=/opt/disq/bin/disq-server "
    assert text.count(shipped) == 1
    unit = tmp_path / "disq.service"
    unit.write_text(text.replace(shipped, f"ExecStart={server} "))
    done = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert [line for line in done.stderr.splitlines() if "disq.service" in line] == []


def test_systemd_config_is_valid_and_matches_the_unit(tmp_path: Path) -> None:
    config = parse_config(SYSTEMD_CONF.read_text(), tmp_path)
    unit = UNIT.read_text()
    assert f"WorkingDirectory={config.dir}\n" in unit
    assert "StateDirectory=disq\n" in unit and config.dir == "/var/lib/disq"
    assert "ExecStart=/opt/disq/bin/disq-server /etc/disq/disq.conf\n" in unit
    # systemd collects the log and tracks the process: no daemon, no log file
    assert not config.daemonize and config.logfile == "" and config.pidfile == ""
    assert config.appendonly and config.cluster_secret and config.requirepass
    limit = int(unit.split("LimitNOFILE=")[1].split()[0])
    assert limit >= config.maxclients + 32  # disq lowers maxclients to fit otherwise


def test_a_node_starts_with_the_systemd_config(
        tmp_path: Path, start_node: Callable[..., Any]) -> None:
    """The shipped config on this machine: only its addresses and dir differ (the
    test's flags win over the file, as on any command line)."""
    text = with_secrets(SYSTEMD_CONF.read_text(), tmp_path / "secrets.conf")
    node = start_node("--metrics-bind", "127.0.0.1", "--metrics-port", "0",
                      config_text=text, client_kwargs={"password": "test-password"})
    client = node.client()
    assert client.config_get("appendonly") == {"appendonly": "yes"}
    assert client.info("persistence")["aof_enabled"] == 1
    assert client.ping()


# -- Kubernetes ---------------------------------------------------------------------------
def manifest() -> dict[str, dict[str, Any]]:
    """The manifest's objects by kind and name ("Service/disq")."""
    yaml = pytest.importorskip("yaml")
    docs = [doc for doc in yaml.safe_load_all(MANIFEST.read_text()) if doc]
    return {f"{doc['kind']}/{doc['metadata']['name']}": doc for doc in docs}


def container(statefulset: dict[str, Any], name: str) -> dict[str, Any]:
    found = [c for c in statefulset["spec"]["template"]["spec"]["containers"]
             if c["name"] == name]
    assert len(found) == 1, name
    return found[0]


def mount_path(c: dict[str, Any], volume: str) -> str:
    paths = [m["mountPath"] for m in c["volumeMounts"] if m["name"] == volume]
    assert len(paths) == 1, volume
    return str(paths[0])


def probe_script() -> ModuleType:
    """disq-k8s.py, from the ConfigMap, as a module."""
    source = manifest()["ConfigMap/disq-config"]["data"]["disq-k8s.py"]
    spec = importlib.util.spec_from_loader("disq_k8s", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    exec(compile(source, "disq-k8s.py", "exec"), module.__dict__)
    return module


def test_kubernetes_manifest_agrees_with_its_config(tmp_path: Path) -> None:
    objects = manifest()
    assert set(objects) == {"Service/disq", "Service/disq-client", "ConfigMap/disq-config",
                            "StatefulSet/disq", "PodDisruptionBudget/disq"}
    config_map = objects["ConfigMap/disq-config"]["data"]
    config = parse_config(config_map["disq.conf"], tmp_path)
    sts = objects["StatefulSet/disq"]
    spec, pod = sts["spec"], sts["spec"]["template"]["spec"]
    labels = spec["template"]["metadata"]["labels"]
    disq = container(sts, "disq")

    # the server reads the ConfigMap's file, and keeps its data on the volume
    config_dir = mount_path(disq, "config")
    assert disq["command"] == ["disq-server"]
    assert disq["args"] == [f"{config_dir}/disq.conf"]
    assert mount_path(disq, "data") == config.dir
    assert [t["metadata"]["name"] for t in spec["volumeClaimTemplates"]] == ["data"]
    secrets_dir = mount_path(disq, "secrets")
    include = [line.split()[1] for line in config_map["disq.conf"].splitlines()
               if line.startswith("include ")]
    assert include == [f"{secrets_dir}/secrets.conf"]

    # ports: the client port, the bus (+ 10000), the metrics
    ports = {p["name"]: p["containerPort"] for p in disq["ports"]}
    assert ports == {"client": config.port, "bus": config.port + BUS_PORT_OFFSET,
                     "metrics": config.metrics_port}
    assert config.port == 7711 and config.bind == ["0.0.0.0"]
    assert config.metrics_bind == "0.0.0.0"  # Prometheus scrapes the pod's address
    for name in ("Service/disq", "Service/disq-client"):
        service = objects[name]["spec"]
        assert service["selector"] == labels
        for port in service["ports"]:
            assert ports[port["targetPort"]] == port["port"], (name, port)
    headless = objects["Service/disq"]["spec"]
    assert headless["clusterIP"] == "None" and headless["publishNotReadyAddresses"]
    assert spec["serviceName"] == "disq"

    # the peers sidecar names every replica through the headless Service
    peers = container(sts, "peers")
    env = {e["name"]: e["value"] for e in peers["env"]}
    assert env["DISQ_PEERS"].split() == [f"disq-{i}.disq" for i in range(spec["replicas"])]
    assert mount_path(peers, "secrets") == secrets_dir
    script = f"{mount_path(peers, 'config')}/disq-k8s.py"
    assert peers["command"] == ["python3", script, "peers"]
    for probe, mode in (("readinessProbe", "ready"), ("livenessProbe", "ping")):
        assert disq[probe]["exec"]["command"] == ["python3", script, mode]
    module = probe_script()
    assert module.PORT == config.port
    assert module.SECRETS == f"{secrets_dir}/secrets.conf"

    # one pod down at a time, the same pods
    pdb = objects["PodDisruptionBudget/disq"]["spec"]
    assert pdb["maxUnavailable"] == 1 and pdb["selector"]["matchLabels"] == labels
    assert spec["selector"]["matchLabels"] == labels
    assert pod["terminationGracePeriodSeconds"] >= 10


def test_kubernetes_probes_against_a_real_node(
        tmp_path: Path, start_node: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe script of the ConfigMap, against a node with a password: `ping` and
    `ready` pass, and fail (exit status 1, or an error) on a wrong password."""
    secrets = tmp_path / "secrets.conf"
    secrets.write_text(SECRETS_TEXT)
    node = start_node("--requirepass", "test-password", "--appendonly", "yes",
                      client_kwargs={"password": "test-password"})
    monkeypatch.setenv("DISQ_PORT", str(node.port))
    monkeypatch.setenv("DISQ_SECRETS", str(secrets))
    module = probe_script()
    assert module.main("ping") == 0
    assert module.main("ready") == 0
    secrets.write_text("requirepass wrong\n")
    with pytest.raises(RuntimeError, match="invalid password"):
        module.main("ping")


# -- monitoring (docs/operations/monitoring.md) -----------------------------------------
MONITORING = ROOT / "docs" / "operations" / "monitoring.md"


def alert_rules() -> str:
    """The Prometheus rules file the page shows (its only YAML block with `groups:`)."""
    blocks = MONITORING.read_text().split("```yaml\n")[1:]
    rules = [block.split("\n```")[0] for block in blocks if block.startswith("groups:")]
    assert len(rules) == 1
    return rules[0] + "\n"


def test_the_alert_rules_pass_promtool(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed")
    rules = tmp_path / "disq-rules.yml"
    rules.write_text(alert_rules())
    done = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_series_the_page_names_is_served(start_node: Callable[..., Any]) -> None:
    """Each `disq_...` name on the monitoring page (tables, PromQL, rules) is a metric
    family or a sample of a real node's /metrics, even with no sample yet."""
    port = free_port()
    node = start_node("--metrics-port", str(port))
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    served = set()
    for line in text.splitlines():
        words = line.split()
        if line.startswith("# TYPE ") or line.startswith("# HELP "):
            served.add(words[2])
        elif words:
            served.add(words[0].split("{")[0])
    # a counter family without samples shows its name without _total in HELP/TYPE
    served |= {f"{name}_total" for name in served}
    named = set(re.findall(r"\bdisq_[a-z0-9_]+", MONITORING.read_text()))
    named -= {"disq_compiled"}  # an INFO field, not a metric
    assert named and named <= served, sorted(named - served)
    assert node.alive()


def test_the_peers_script_meets_pods_and_follows_a_new_address(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`disq-k8s.py peers`, one round at a time, on nodes that share a port on three
    loopback addresses as pods do on theirs: it meets the peers its names resolve to,
    and when a node comes back at another address with its nodes.conf (a recreated
    pod), it forgets and meets it again there (a node keeps a peer's first address)."""
    port = free_port()
    monkeypatch.setenv("DISQ_PORT", str(port))
    monkeypatch.setenv("DISQ_SECRETS", str(tmp_path / "none"))  # no password
    module = probe_script()
    nodes = [DisqProcess(tmp_path / f"pod{i}", port=port, host=f"127.0.0.{i + 1}")
             for i in range(3)]
    moved = DisqProcess(tmp_path / "pod2", port=port, host="127.0.0.4")
    try:
        for node in nodes:
            node.start()
        local, other, third = nodes  # the script talks to the node on 127.0.0.1
        monkeypatch.setenv("DISQ_PEERS", "127.0.0.2 127.0.0.3 127.0.0.1")
        module.meet_peers()
        third_id = myid(third)

        def seen(node: DisqProcess, host: str) -> bool:
            """Whether `node` knows the third pod at host, linked."""
            known = cluster_nodes(node).get(third_id)
            return known is not None and known.addr == f"{host}:{port}" and (
                known.link == "connected")
        wait_for(lambda: {n.addr for n in cluster_nodes(other).values()
                          if n.link == "connected"}
                 >= {f"127.0.0.1:{port}", f"127.0.0.3:{port}"}, timeout=15)
        wait_for(lambda: seen(local, "127.0.0.3"), timeout=15)  # (gossip: a loaded machine)
        third.stop()
        moved.start()
        monkeypatch.setenv("DISQ_PEERS", "127.0.0.2 127.0.0.4")
        module.meet_peers()
        wait_for(lambda: seen(local, "127.0.0.4"), timeout=15)
    finally:
        for node in [*nodes, moved]:
            node.stop()
