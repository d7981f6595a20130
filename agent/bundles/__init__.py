"""Signed result bundles: one file a sweep's owner shares, which anyone can check (docs/bundles.md).

layout.py says what goes in and how big it may be; pack.py writes one (`spark-agent share`); unpack.py reads one
without trusting it; signing.py is OpenSSH's `ssh-keygen -Y`; claims.py is the judgement a bundle carries, made by
agent.judging; verify.py checks it all again and gives the tier; agree.py decides whether two owners' bundles agree.
"""
