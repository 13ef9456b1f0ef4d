"""What a lab install of the seed leaves on every node's tree, the complete node environment:
runc, the runc shim, containerd, kubelet; on registered nodes crictl, /etc/crictl.yaml and every
CNI plugin; the modules and sysctl files with their lines; and the kernel and swap work recorded
(the lab's nodes share one kernel, so modprobe, sysctl and swapoff are recorded, not run)."""
from __future__ import annotations

import json

import yaml

from bke.core.artefacts import CNI_PLUGINS
from bke.lab.standins.binary_placeholder import lab_binary_bytes
from bke_agent.lablayout import LabLayout


def _lines(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]


def assert_complete_node_environment(lab) -> None:
    repo = lab.plan.spec.config.http_repo.rstrip("/")
    for node in lab.plan.nodes:
        tree = lab.host(node.hostname)
        binaries = {"usr/local/sbin/runc": f"runc/1.3.6/linux/{node.arch}/runc",
                    "usr/local/bin/containerd-shim-runc-v2": f"containerd/2.1.1/linux/{node.arch}/containerd-shim-runc-v2",
                    "usr/local/bin/containerd": f"containerd/2.1.1/linux/{node.arch}/containerd",
                    "usr/bin/kubelet": f"kubernetes/1.33.2/linux/{node.arch}/kubelet"}
        if node.registers:
            binaries |= {"usr/local/bin/crictl": f"crictl/1.32.0/linux/{node.arch}/crictl",
                         **{f"opt/cni/bin/{p}": f"cni-plugins/1.6.2/linux/{node.arch}/{p}" for p in CNI_PLUGINS}}
        for path, tree_path in binaries.items():
            # the lab's stand-in for the download, from exactly the artefact's httpRepo URL
            assert (tree / path).read_bytes() == lab_binary_bytes(f"{repo}/{tree_path}"), (node.hostname, path)
            assert (tree / path).stat().st_mode & 0o777 == 0o755
        modules = _lines((tree / "etc/modules-load.d/bke.conf").read_text())
        assert {"overlay", "br_netfilter"} <= set(modules), node.hostname
        sysctl = _lines((tree / "etc/sysctl.d/99-bke.conf").read_text())
        assert {"net.ipv4.ip_forward = 1", "net.bridge.bridge-nf-call-iptables = 1",
                "net.bridge.bridge-nf-call-ip6tables = 1"} <= set(sysctl), node.hostname
        crictl = yaml.safe_load((tree / "etc/crictl.yaml").read_text())
        assert crictl["runtime-endpoint"] == crictl["image-endpoint"] == "unix:///run/containerd/containerd.sock"
        layout = LabLayout(tree)
        recorded = [json.loads(line)["argv"] for line in layout.programs_log.read_text().splitlines()]
        assert ["modprobe", "-a", *modules] in recorded and ["sysctl", "-p", "/etc/sysctl.d/99-bke.conf"] in recorded
        assert ["swapoff", "-a"] in recorded
        assert json.loads(layout.unit_file("swap.target").read_text())["masked"] is True
