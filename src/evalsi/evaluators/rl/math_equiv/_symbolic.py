"""stub"""
import os, time
def warm_up() -> None:
    import math_verify
    math_verify.verify(math_verify.parse("$1$"), math_verify.parse("$1$"))

def compare(a, b):
    import math_verify
    return os.getpid(), math_verify.verify(math_verify.parse(a), math_verify.parse(b), timeout_seconds=None)

def spin(n):
    return 2 ** (2 ** n)
