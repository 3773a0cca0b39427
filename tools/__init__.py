"""diptych.tools"""
