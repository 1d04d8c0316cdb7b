"""Graph surgery: named surgeons configured like Olive's GraphSurgeries, and a Python surgery API."""
