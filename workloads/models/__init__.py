"""diptych.workloads.models"""
