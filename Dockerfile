# tas-extender service image: `docker build -t tas-extender:0.1.0 .`
# Runs `tas-extender serve` (flags or TAS_* environment variables) as a non-root user on port 8888.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY topology ./topology
COPY grouper ./grouper
COPY app ./app
RUN pip install . \
    && rm -rf /src \
    && groupadd --gid 10001 tas \
    && useradd --uid 10001 --gid 10001 --create-home --home-dir /home/tas --shell /usr/sbin/nologin tas

# Numeric, so Kubernetes can check runAsNonRoot without reading /etc/passwd.
USER 10001:10001
WORKDIR /home/tas
EXPOSE 8888
ENTRYPOINT ["tas-extender", "serve"]
