"""Running: playbooks over the fleet, the sweep, progress and collect (provision → serve → measure → collect)."""
