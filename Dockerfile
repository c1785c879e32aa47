# Oreo: Streamlit UI + CLI + HTTP API (oreo api), embedded Spark (or Spark Connect via SPARK_REMOTE), DuckDB reads.
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64 \
    DELTA_DATA_ROOT=/data/delta \
    OREO_DATABASE_URL=sqlite:////data/oreo-catalog.db \
    HOME=/home/oreo

RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps tini \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --create-home --home-dir /home/oreo --uid 10001 oreo \
 && mkdir -p /data/delta \
 && chown -R oreo:oreo /data

WORKDIR /opt/oreo
COPY requirements.txt pyproject.toml README.md ./
RUN pip install -r requirements.txt
COPY core ./core
COPY interface ./interface
COPY cli ./cli
COPY api ./api
COPY app ./app
COPY pages ./pages
COPY scripts ./scripts
COPY .streamlit/config.toml ./.streamlit/config.toml
RUN pip install --no-deps -e .
# Resolve the Delta jars at build time and keep the files in /usr/local/oreo-jars (sys.prefix), which
# core.engine passes to Spark as spark.jars: containers start Spark without the network or an Ivy cache.
# Then dump the classes a Spark start loads into /usr/local/oreo-spark.jsa (scripts/jvm_archive.py): every
# start in the container maps it instead of loading and verifying them again (about a third less CPU).
RUN HOME=/root DELTA_DATA_ROOT=/tmp/warm python scripts/fetch_jars.py \
 && HOME=/root DELTA_DATA_ROOT=/tmp/warm python scripts/jvm_archive.py \
 && rm -rf /tmp/warm /tmp/oreo-catalog.db /root/.ivy2.5.2 /root/.m2

USER oreo

VOLUME ["/data"]
EXPOSE 8501
# The HTTP API: `docker run -p 8600:8600 oreo:local oreo api --host 0.0.0.0` (docs/api.md).
EXPOSE 8600
# Prometheus metrics of the app (core.metrics.serve, OREO_METRICS_PORT).
EXPOSE 9464
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s CMD python -c "import urllib.request; urllib.request.urlopen('http://localhost:8501/_stcore/health')"
ENTRYPOINT ["tini", "--"]
CMD ["streamlit", "run", "app/main.py", "--server.port=8501", "--server.address=0.0.0.0", "--server.headless=true"]
