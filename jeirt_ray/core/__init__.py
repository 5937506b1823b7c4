"""The bottom layer: where jeirt keeps its files (`paths`) and how commands log (`logs`)."""
