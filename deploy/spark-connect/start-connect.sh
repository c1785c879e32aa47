#!/usr/bin/env bash
# Start the Spark Connect server on the standalone master, as scripts/cluster.py's connect_command does:
# spark-submit --class ...SparkConnectServer, the Delta jars, and the confs of cluster.connect_confs()
# (spark-connect.conf). The S3 endpoint, region and credentials come from the standard AWS variables.
set -euo pipefail
: "${SPARK_MASTER_URL:?SPARK_MASTER_URL is not set (spark://spark-master:7077)}"
: "${AWS_ENDPOINT_URL:?AWS_ENDPOINT_URL is not set}"
: "${AWS_REGION:?AWS_REGION is not set}"
: "${AWS_ACCESS_KEY_ID:?AWS_ACCESS_KEY_ID is not set}"
: "${AWS_SECRET_ACCESS_KEY:?AWS_SECRET_ACCESS_KEY is not set}"
exec "$SPARK_HOME/bin/spark-submit" \
  --master "$SPARK_MASTER_URL" \
  --class org.apache.spark.sql.connect.service.SparkConnectServer \
  --name oreo-connect \
  --driver-memory "${SPARK_DRIVER_MEMORY:-1536m}" \
  --jars "$(cat /opt/oreo-jars/jars.list)" \
  --properties-file /opt/oreo-spark/spark-connect.conf \
  --conf "spark.hadoop.fs.s3a.endpoint=$AWS_ENDPOINT_URL" \
  --conf "spark.hadoop.fs.s3a.endpoint.region=$AWS_REGION" \
  --conf "spark.hadoop.fs.s3a.access.key=$AWS_ACCESS_KEY_ID" \
  --conf "spark.hadoop.fs.s3a.secret.key=$AWS_SECRET_ACCESS_KEY" \
  spark-internal
