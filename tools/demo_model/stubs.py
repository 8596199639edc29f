"""Held-out function stubs and whether a completion of one parses (issue 19's quality measure).

function_stubs picks them (train.py, from the held-out code, into metrics.json); body_parses judges a
greedy completion (eval_stubs.py, which lets Kapitsa complete them). Only the standard library.
"""


def function_stubs(code_texts, n):
    """n held-out Python functions as stubs: a top-level def with a docstring and at least two more
    statements, cut after its docstring (one per file, files in held-out order). Returns (stub, name)."""
    import ast
    stubs = []
    for text in code_texts:
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
        lines = text.splitlines(keepends=True)
        for node in tree.body:
            if (isinstance(node, ast.FunctionDef) and not node.decorator_list and ast.get_docstring(node)
                    and len(node.body) >= 3 and node.body[0].end_lineno < node.end_lineno):
                stubs.append(("".join(lines[node.lineno - 1:node.body[0].end_lineno]), node.name))
                break
        if len(stubs) == n:
            break
    return stubs


def body_parses(stub, completion):
    """stub + completion up to the first line back at column 0 parses as a function with at least one
    statement after its docstring."""
    import ast
    import re
    m = re.search(r"\n(?=[^\s])", completion)
    src = stub + (completion[:m.start() + 1] if m else completion)
    try:
        tree = ast.parse(src)
    except (SyntaxError, ValueError):
        return False, src
    fn = tree.body[0] if tree.body else None
    return isinstance(fn, ast.FunctionDef) and len(fn.body) >= 2, src
