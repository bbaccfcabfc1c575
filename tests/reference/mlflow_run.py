"""Prints one MLflow run as JSON, read through MLflow's own client: its status, name, parameters,
tags and every value of every metric, by step. Runs in the server's environment
(/opt/dtrain-mlflow, scripts/setup.sh --tests).

usage: mlflow_run.py TRACKING_URI RUN_ID
"""
import json
import sys

from mlflow.tracking import MlflowClient

uri, run_id = sys.argv[1], sys.argv[2]
client = MlflowClient(tracking_uri=uri)
run = client.get_run(run_id)
metrics = {}
for key in run.data.metrics:
    by_step = metrics.setdefault(key, {})
    for m in client.get_metric_history(run_id, key):
        by_step.setdefault(str(m.step), []).append(m.value)
json.dump({"status": run.info.status, "name": run.info.run_name, "params": run.data.params,
           "tags": run.data.tags, "metrics": metrics}, sys.stdout)
