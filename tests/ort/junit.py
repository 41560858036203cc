"""junit.py - writes a JUnit XML file (one <testcase> per check) for Bazel's test.xml, so
scripts/run_tests.sh counts each check of a Python test the way it counts GoogleTest cases."""
import os
from xml.sax.saxutils import escape, quoteattr


def write(path, suite, cases):
    """cases: list of (name, ok, text). path None: $XML_OUTPUT_FILE when Bazel sets it."""
    path = path or os.environ.get("XML_OUTPUT_FILE")
    if not path:
        return
    fails = sum(1 for _, ok, _ in cases if not ok)
    out = ['<?xml version="1.0" encoding="UTF-8"?>',
           f'<testsuites tests="{len(cases)}" failures="{fails}">',
           f'<testsuite name={quoteattr(suite)} tests="{len(cases)}" failures="{fails}">']
    for name, ok, text in cases:
        out.append(f'<testcase name={quoteattr(name)} classname={quoteattr(suite)}>')
        if not ok:
            out.append(f'<failure message="failed">{escape(text)}</failure>')
        out.append('</testcase>')
    out += ['</testsuite>', '</testsuites>', '']
    with open(path, "w") as f:
        f.write("\n".join(out))
