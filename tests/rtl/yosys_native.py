"""``yosys -ql LOG SCRIPT``, the one Yosys command line sby runs, on pyosys: the native Yosys
the RTL extra already installs (for ``diptych rtl area``). tests/rtl/rtl_control_formal.py
hands it to ``yowasp-sby`` as its Yosys so that YoWASP's WebAssembly Yosys, which compiles
itself on a machine's first run (≈ 45 s wall, 80 s CPU on 2 cores), never runs; sby and
smtbmc themselves are Python."""
import sys

from pyosys import libyosys as ys


def main(argv):
    log, script = None, None
    args = iter(argv)
    for a in args:
        if a == "-ql":
            log = next(args)
        else:
            script = a
    d = ys.Design()
    try:
        ys.run_pass(f"tee -q -o {log} script {script}" if log else f"script {script}", d)
    except Exception as exc:  # a failing pass: Yosys' own exit status
        print(f"ERROR: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
