#!/usr/bin/env python3
"""toolwire exec tool: unit conversion.

Reads the toolwire stdin envelope {"arguments": {...}, "state": {...}, "call": {...}} and prints
one JSON object. Errors go to stderr with a non-zero exit code, which toolwire turns into a
`nonzero_exit` result the model can read.
"""
import json
import sys

LINEAR = {  # unit -> (dimension, factor to the base unit)
    "m": ("length", 1.0), "km": ("length", 1000.0), "mi": ("length", 1609.344), "ft": ("length", 0.3048),
    "kg": ("mass", 1.0), "lb": ("mass", 0.45359237),
}
TEMPERATURE = {"C", "F", "K"}


def to_kelvin(v, unit):
    return {"C": v + 273.15, "F": (v - 32) * 5 / 9 + 273.15, "K": v}[unit]


def from_kelvin(v, unit):
    return {"C": v - 273.15, "F": (v - 273.15) * 9 / 5 + 32, "K": v}[unit]


def main():
    args = json.load(sys.stdin)["arguments"]
    value, src, dst = float(args["value"]), args["from"], args["to"]
    if src in TEMPERATURE and dst in TEMPERATURE:
        result = from_kelvin(to_kelvin(value, src), dst)
    elif src in LINEAR and dst in LINEAR and LINEAR[src][0] == LINEAR[dst][0]:
        result = value * LINEAR[src][1] / LINEAR[dst][1]
    else:
        print(f"cannot convert {src} to {dst}: they measure different things", file=sys.stderr)
        return 2
    print(json.dumps({"value": float(f"{result:.4g}"), "unit": dst}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
