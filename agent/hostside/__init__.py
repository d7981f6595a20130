"""Code that runs ON the Spark. Standard library only: a host may have nothing but python3.

The controller imports the very same modules; the Ansible modules in playbooks/library reach them
through playbooks/module_utils/spark_hostside (a symlink to this folder), so there is one copy.
Modules here import each other only relatively (`from . import x`).
"""
