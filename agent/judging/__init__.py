"""Judging: what loaded vs what was asked (attest), statistics, and the bandwidth ceiling."""
