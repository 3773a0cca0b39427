"""diptych.rtl"""
