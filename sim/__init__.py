"""diptych.sim"""
