# The team server's image: the project's wheel (compiled hot path inside) with the `team` extra
# (PostgreSQL), on a slim Python, run as a non-root user. `compose.yaml` runs two of it behind
# nginx on one PostgreSQL database; docs/team.md says how.

# Build stage: a C compiler builds the wheel (Cython comes from the build requirements).
FROM python:3.12-slim AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py MANIFEST.in README.md ./
COPY ext ext
COPY protocols protocols
COPY src src
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

# Run stage: the wheel and its dependencies only, no compiler.
FROM python:3.12-slim
RUN useradd --system --uid 10001 --user-group --home-dir /var/lib/cursor-byok --create-home cursor-byok
COPY --from=build /wheels /wheels
RUN wheel="$(ls /wheels/cursor_byok-*.whl)" \
    && pip install --no-cache-dir "${wheel}[team]" \
    && rm -rf /wheels
USER cursor-byok
WORKDIR /var/lib/cursor-byok
ENV CURSOR_BYOK_CONFIG=/etc/cursor-byok/config.toml \
    PYTHONUNBUFFERED=1
EXPOSE 8787
# The health probe needs no token and says no more than "a server is here" (204).
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8787/healthz', timeout=2).status != 204)"]
ENTRYPOINT ["cursor-byok"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8787", "--data-dir", "/var/lib/cursor-byok"]
