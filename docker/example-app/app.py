#!/usr/bin/env python3
"""The example app: a tiny HTTP service exposing the tool endpoints of the shipped tools.d/.

Stdlib only. `GET /v1/weather/{city}?units=metric|imperial` answers deterministic fake weather
(requires `Authorization: Bearer $EXAMPLE_APP_TOKEN`, default `dev-token`). `GET /healthz`
answers 200. Listens on $PORT (default 8081) at $HOST (default 127.0.0.1).
"""
import hashlib
import json
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlparse

TOKEN = os.environ.get("EXAMPLE_APP_TOKEN", "dev-token")
CONDITIONS = ["sunny", "cloudy", "rain", "snow", "windy", "fog"]


def weather(city, units):
    h = int(hashlib.sha256(city.lower().encode()).hexdigest(), 16)
    temp_c = (h % 35) - 5
    wind_kmh = (h >> 8) % 40
    out = {"city": city, "conditions": CONDITIONS[(h >> 16) % len(CONDITIONS)]}
    if units == "imperial":
        out.update(temp_f=round(temp_c * 9 / 5 + 32, 1), wind_mph=round(wind_kmh / 1.609, 1))
    else:
        out.update(temp_c=temp_c, wind_kmh=wind_kmh)
    return out


class Handler(BaseHTTPRequestHandler):
    def _send(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        url = urlparse(self.path)
        if url.path == "/healthz":
            return self._send(200, {"status": "ok"})
        if url.path.startswith("/v1/weather/"):
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                return self._send(401, {"error": "missing or wrong bearer token"})
            city = unquote(url.path[len("/v1/weather/"):])
            if not city or "/" in city:
                return self._send(404, {"error": f"unknown city {city!r}"})
            units = parse_qs(url.query).get("units", ["metric"])[0]
            if units not in ("metric", "imperial"):
                return self._send(400, {"error": "units must be metric or imperial"})
            return self._send(200, weather(city, units))
        return self._send(404, {"error": "not found"})

    def log_message(self, fmt, *args):  # one short line per request on stderr
        print("example-app:", fmt % args, flush=True)


if __name__ == "__main__":
    host, port = os.environ.get("HOST", "127.0.0.1"), int(os.environ.get("PORT", "8081"))
    ThreadingHTTPServer((host, port), Handler).serve_forever()
