"""Backend-free tile schedules with host reference math (pure Python)."""
