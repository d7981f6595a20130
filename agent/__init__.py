"""spark-agent: provision DGX Sparks with Ansible, serve vLLM, attest what loaded, measure, report.

The pipeline, one module per stage:
spec -> plan -> provision -> serve -> attest -> measure -> collect -> report
"""

__version__ = "0.1.0"
