"""The DRA driver's device names as the e2e scripts read them (docs/dra.md): neurondeviceD,
neurondevices-A-B (devices A..B) and neuroncores-A-B (node-wide logical cores A..B at the node's
LNC, `cpd` logical cores per device). The one home of that mapping for the scenarios."""
import re


def devices_of(name, cpd):
    """The devices the DRA device `name` holds (a core range: the device of its cores)."""
    m = re.fullmatch(r"neurondevice(\d+)", name)
    if m:
        return {int(m.group(1))}
    m = re.fullmatch(r"neurondevices-(\d+)-(\d+)", name)
    if m:
        return set(range(int(m.group(1)), int(m.group(2)) + 1))
    m = re.fullmatch(r"neuroncores-(\d+)-(\d+)", name)
    if m:
        return {c // cpd for c in range(int(m.group(1)), int(m.group(2)) + 1)}
    raise ValueError(f"unknown DRA device name {name}")


def units_of(name, cpd):
    """What `name` holds as (device, logical core in it) pairs; a device holds all its cores."""
    m = re.fullmatch(r"neuroncores-(\d+)-(\d+)", name)
    if m:
        return {(c // cpd, c % cpd) for c in range(int(m.group(1)), int(m.group(2)) + 1)}
    return {(d, k) for d in devices_of(name, cpd) for k in range(cpd)}


if __name__ == "__main__":
    # offers_with: the names on stdin that hold any of the devices argv[1] ("D1 D2 ..").
    import sys
    held = set(map(int, sys.argv[1].split()))
    cpd = int(sys.argv[2])
    print(" ".join(n for n in sys.stdin.read().split() if devices_of(n, cpd) & held))
