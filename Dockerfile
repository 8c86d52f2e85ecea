# tas-extender service image: `docker build -t tas-extender:0.1.0 .`
# Runs `tas-extender serve` (flags or TAS_* environment variables) as a non-root user on port 8888.
#
# Reproducible: the base image is pinned by digest and every Python package comes from requirements.lock with
# its sha256 (scripts/lock.sh regenerates it). To move the base, pass another digest of the same Python minor:
#   docker build --build-arg PYTHON_IMAGE=python:3.11-slim@sha256:<digest> .
# (`docker buildx imagetools inspect python:3.11-slim` prints the current one.)
ARG PYTHON_IMAGE=python:3.11-slim@sha256:9c900dea9e8fb7e16277c179b555cc72d29a352dbc33cff48ad5a0412fd5bfc7
FROM ${PYTHON_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# Timestamps of the built wheel and of the layers (BuildKit) from a fixed date, not the build's clock.
ARG SOURCE_DATE_EPOCH=0

WORKDIR /src
COPY requirements.lock pyproject.toml README.md ./
COPY topology ./topology
COPY grouper ./grouper
COPY app ./app
# The locked packages first (hash-checked, no resolver), then the service itself with no dependencies, no index
# and the locked setuptools: nothing unpinned can enter the image.
RUN pip install --require-hashes --no-deps -r requirements.lock \
    && pip install --no-deps --no-index --no-build-isolation . \
    && rm -rf /src \
    && groupadd --gid 10001 tas \
    && useradd --uid 10001 --gid 10001 --create-home --home-dir /home/tas --shell /usr/sbin/nologin tas

# Numeric, so Kubernetes can check runAsNonRoot without reading /etc/passwd.
USER 10001:10001
WORKDIR /home/tas
EXPOSE 8888
ENTRYPOINT ["tas-extender", "serve"]
