"""diptych.workloads"""
