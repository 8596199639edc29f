#!/usr/bin/env python3
# Regenerates jinja_cases.json: small templates rendered by Jinja2 configured exactly like
# transformers' apply_chat_template (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
# loopcontrols, its tojson and raise_exception). Each case records the output or that it raised.
# Usage: python3 make_jinja_cases.py > jinja_cases.json
import json
import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception

CTX = {
    "s": "Hello, World",
    "u": "héllo wörld 😀 ß",
    "n": 7, "f": 2.5, "neg": -3, "t": True, "z": None, "e": "", "big": 12345678901234,
    "l": [3, 1, 2], "words": ["b", "A", "c", "a"],
    "d": {"b": 1, "a": [1, 2, {"x": None}], "c": "q'\"\n"},
    "msgs": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"},
             {"role": "assistant", "content": "yo", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]},
             {"role": "tool", "content": "r"}],
    "items": [{"name": "x", "v": 2, "ok": True}, {"name": "y", "v": 1, "ok": False}, {"name": "z", "v": 3}],
    "nested": [[1, [2, 3]], [4]],
    "floats": [0.1, 1e-7, 1e16, 1e22, 123456789.0, -0.0, 1.5e300, 3.0],
}

CASES = [
    # whitespace control, trim_blocks, lstrip_blocks
    "a\n  {% if t %}\n  yes\n  {% endif %}\nb",
    "a  {%- if t -%}  x  {%- endif -%}  b",
    "{% for i in l %}\n  {{ i }}\n{% endfor %}\n",
    "  {%+ if t %}keep{% endif %}\n",
    "{% if t +%}\nx{% endif %}",
    "x {# comment #}\ny\n  {# c2 #}\nz",
    "{{- ' a ' -}}\n\n{{ 'b' }}   \n",
    "line1\r\nline2\r\n{% if t %}\r\nin\r\n{% endif %}\r\n",
    "trailing\n\n",
    "{% raw %}{{ not parsed }}{% endraw %}",
    "a\n    {%- for x in l %} {{ x }}{% endfor %}",
    "{{ 'x' }}\n    {% if t %}y{% endif %}",
    # literals and printing
    "{{ none }} {{ None }} {{ true }} {{ False }} {{ z }} {{ undefinedvar }}|",
    "{{ [1, 'a', none, true, 2.0, {'k': \"v'\"}] }}",
    "{{ d }}",
    "{{ floats }}",
    "{{ 1 / 3 }} {{ 10 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }}",
    "{{ 1 + 2 * 3 - 4 }} {{ (1 + 2) * 3 }} {{ -n }} {{ +n }} {{ 1.5 + 1 }} {{ 3 * 'ab' }} {{ [1] * 3 }}",
    "{{ 'a' ~ 1 ~ none ~ true ~ undefinedvar }}",
    "{{ 'a' 'b' \"c\" }}",
    "{{ '\\u00e9\\x41\\n\\t\\\\' }}",
    "{{ 1_000 + 0x10 }}",
    "{{ 1e3 }} {{ 2.5e-3 }}",
    # strings and methods
    "{{ s.upper() }} {{ s.lower() }} {{ s.title() }} {{ 'hello world'.capitalize() }}",
    "{{ s.startswith('Hell') }} {{ s.endswith(('x', 'ld')) }} {{ s.find('o') }} {{ s.rfind('o') }} {{ s.count('l') }}",
    "{{ s.split(', ') }} {{ '  a  b  '.split() }} {{ 'a,b,c'.split(',', 1) }} {{ 'a,b,c'.rsplit(',', 1) }}",
    "[{{ '  x  '.strip() }}][{{ '  x  '.lstrip() }}][{{ '  x  '.rstrip() }}][{{ 'xxaxx'.strip('x') }}]",
    "{{ s.replace('l', 'L') }} {{ s.replace('l', 'L', 1) }}",
    "{{ u.upper() }} {{ u|length }} {{ u[1] }} {{ u[-1] }} {{ u[::-1] }} {{ u[2:5] }}",
    "{{ '{} and {}'.format('a', 1) }} {{ '{x}!'.format(x=2) }}",
    "{{ '-'.join(['a', 'b']) }} {{ 'abc'.center(9, '*') }}",
    "{{ 'x'.isdigit() }} {{ '12'.isdigit() }} {{ 'Ab'.isalpha() }} {{ 'ab'.islower() }} {{ 'AB'.isupper() }}",
    "{{ 'line1\\nline2\\r\\nline3'.splitlines() }}",
    "{{ s[0] }} {{ s[-1] }} {{ s[:5] }} {{ s[7:] }} {{ s[::2] }} {{ s[::-1] }} {{ s[100:] }} {{ s[-100:2] }}",
    "{{ l[::-1] }} {{ l[1:] }} {{ l[:-1] }} {{ l[5] }}|{{ l[-1] }} {{ l[::2] }} {{ l[2:0:-1] }}",
    # dicts
    "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
    "{{ d.keys() | list }} {{ d.values() | list }} {{ d.get('b') }} {{ d.get('q') }} {{ d.get('q', 5) }}",
    "{{ d.b }} {{ d['a'][2].x }} {{ d.missing }}|{{ d['missing'] is defined }}",
    "{% for k in d %}{{ k }}{% endfor %}",
    "{{ 'b' in d }} {{ 'zz' in d }} {{ 2 in l }} {{ 9 not in l }} {{ 'ell' in s }}",
    # tests
    "{{ z is none }} {{ n is number }} {{ t is number }} {{ t is boolean }} {{ n is integer }} {{ f is float }}",
    "{{ s is string }} {{ l is sequence }} {{ d is sequence }} {{ d is mapping }} {{ l is iterable }} {{ undefinedvar is iterable }}",
    "{{ t is true }} {{ 1 is true }} {{ false is false }} {{ 0 is false }} {{ x is undefined }} {{ n is defined }}",
    "{{ n is odd }} {{ n is even }} {{ 9 is divisibleby 3 }} {{ n is eq 7 }} {{ n is equalto 8 }} {{ n is gt 3 }} {{ 'a' is in 'abc' }}",
    "{{ n is not none }} {{ not n is none }} {{ s is lower }} {{ 'AB' is upper }} {{ range is callable }}",
    # comparisons and logic
    "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ n != 7 }}",
    "{{ 0 or 'x' }} {{ 1 and 'y' }} {{ none or none }} {{ '' and 1 }} {{ not 0 }} {{ not 'a' }}",
    "{{ 'yes' if t else 'no' }} {{ 'yes' if z else 'no' }} [{{ 'x' if z }}]",
    # loops
    "{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
    "{% for x in l %}[{{ loop.previtem }}|{{ loop.nextitem }}]{% endfor %}",
    "{% for x in [] %}a{% else %}empty{% endfor %}",
    "{% for x in l if x > 1 %}{{ x }}:{{ loop.index }}/{{ loop.length }} {% endfor %}",
    "{% for x in l %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}",
    "{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}",
    "{% for x in l %}{% for y in l %}{{ loop.index }}{% endfor %}/{{ loop.index }} {% endfor %}",
    "{% for x in l %}{{ loop.cycle('odd', 'even') }}{% endfor %}",
    "{% for c in 'abc' %}{{ c }}-{% endfor %}",
    "{% for x in undefinedvar %}a{% else %}b{% endfor %}",
    "{% for i in range(3) %}{{ i }}{% endfor %}{% for i in range(1, 10, 3) %}{{ i }}{% endfor %}{{ range(5, 0, -2) | list }}",
    "{% for x in nested recursive %}({% if x is iterable %}{{ loop(x) }}{% else %}{{ x }}@{{ loop.depth }}{% endif %}){% endfor %}",
    # set, scoping, namespace
    "{% set x = 1 %}{% for i in l %}{% set x = i %}{% endfor %}{{ x }}",
    "{% set ns = namespace(x=0, y='a') %}{% for i in l %}{% set ns.x = ns.x + i %}{% endfor %}{{ ns.x }}{{ ns.y }}",
    "{% set a, b = [1, 2] %}{{ a }}{{ b }}",
    "{% set block %}  inner {{ n }}  {% endset %}[{{ block }}]",
    "{% set block | upper | trim %}  inner  {% endset %}[{{ block }}]",
    "{% if t %}{% set y = 5 %}{% endif %}{{ y }}",
    "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a }}",
    # macros
    "{% macro m(a, b=2, c='x') %}{{ a }}{{ b }}{{ c }}{% endmacro %}{{ m(1) }} {{ m(1, 3) }} {{ m(1, c='y') }} {{ m() }}",
    "{% macro fact(k) %}{% if k <= 1 %}1{% else %}{{ k * (fact(k - 1) | int) }}{% endif %}{% endmacro %}{{ fact(6) }}",
    "{% macro v() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ v(1, 2, k=3) }}",
    "{% macro outer() %}[{{ caller() }}]{% endmacro %}{% call outer() %}body {{ n }}{% endcall %}",
    "{% macro m(x) %}{{ x }}{% endmacro %}{{ m(1, 2) }}",
    "{% macro g() %}{{ n }}{% endmacro %}{% set n = 99 %}{{ g() }}",
    # filters
    "{{ d | tojson }} {{ l | tojson }} {{ 'é\"<>&' | tojson }} {{ none | tojson }} {{ floats | tojson }}",
    "{{ d | tojson(indent=2) }}",
    "{{ d | tojson(indent=2, sort_keys=true) }} {{ {} | tojson(indent=2) }} {{ [] | tojson(indent=2) }}",
    "{{ d | tojson(separators=(',', ':')) }} {{ u | tojson(ensure_ascii=true) }}",
    "{{ '  x  ' | trim }}|{{ 'xxyxx' | trim('x') }}|{{ s | length }} {{ l | length }} {{ d | length }} {{ undefinedvar | length }}",
    "{{ l | join(', ') }} {{ items | join('-', attribute='name') }} {{ l | first }} {{ l | last }} {{ s | first }}",
    "{{ undefinedvar | default('dflt') }} {{ '' | default('dflt') }} {{ '' | default('dflt', true) }} {{ z | d('n', boolean=true) }}",
    "{{ s | upper }} {{ s | lower }} {{ 'hello wORLD-foo(bar' | title }} {{ 'hELLO' | capitalize }}",
    "{{ s | replace('o', '0') }} {{ 42 | string }} {{ l | string }} {{ z | string }}",
    "{{ items | map(attribute='name') | list }} {{ ['a', 'b'] | map('upper') | list }} {{ items | map(attribute='ok', default='?') | list }}",
    "{{ items | selectattr('ok') | map(attribute='name') | list }} {{ items | rejectattr('ok') | map(attribute='name') | list }}",
    "{{ items | selectattr('v', 'gt', 1) | map(attribute='name') | join }} {{ l | select('odd') | list }} {{ l | reject('odd') | list }}",
    "{{ msgs | selectattr('role', 'equalto', 'user') | list | length }}",
    "{{ l | sort }} {{ l | sort(reverse=true) }} {{ words | sort }} {{ words | sort(case_sensitive=true) }} {{ items | sort(attribute='v') | map(attribute='name') | join }}",
    "{{ words | unique | list }} {{ [1, 2, 1, 3] | unique | list }} {{ d | dictsort }} {{ l | max }} {{ l | min }} {{ l | sum }}",
    "{{ '3' | int }} {{ '3.7' | int }} {{ 'x' | int }} {{ 3.9 | int }} {{ '2.5' | float }} {{ 'x' | float(1.5) }} {{ true | int }}",
    "{{ -3 | abs }} {{ neg | abs }} {{ 2.567 | round(2) }} {{ 2.5 | round }} {{ 3.5 | round }} {{ 2.1 | round(method='ceil') }} {{ 7 | round }}",
    "{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(width='>', blank=true) }}",
    "{{ 'one two  three' | wordcount }} {{ l | reverse | list }} {{ 'abc' | reverse }} {{ d | items | list }}",
    "{{ '<b>' | safe }} {{ '<b>' | e }} {{ s | truncate(8, leeway=0) }}",
    "{{ d | dictsort(by='key', reverse=true) }} {{ l | batch(2) | list }}",
    "{{ '%s-%d' | format('a', 3) }} {{ '%s is %s' % ('x', 1) }} {{ '%05.2f' % 3.14159 }}",
    # errors that Jinja raises
    "{{ raise_exception('custom failure') }}",
    "{{ undefinedvar.attr }}",
    "{{ undefinedvar + 1 }}",
    "{{ 'a' + 1 }}",
    "{{ 1 + 'a' }}",
    "{{ l.append(4) }}",
    "{{ d.update({'x': 1}) }}",
    "{{ s.nomethod() }}",
    "{{ 1 / 0 }}",
    "{% for x in 5 %}{% endfor %}",
    "{% if %}x{% endif %}",
    "{% for x in l %}",
    "{{ x | nofilter }}",
    "{{ x is notatest }}",
    "{% endif %}",
    "{{ 'unterminated }}",
    "{% macro r(k) %}{{ r(k) }}{% endmacro %}{{ r(1) }}",
    "{{ 1 < 'a' }}",
    "{% set x.y = 1 %}",
    "{{ l['a'] }}",
    "{{ foo( }}",
    # second batch: scoping and whitespace corners
    "{% macro m() %}{% set inner = 1 %}{{ inner }}{% endmacro %}{{ m() }}[{{ inner }}]",
    "{% set ns = namespace(v=[]) %}{% macro add(n) %}{% set n.v = n.v + [1] %}{% endmacro %}{{ add(ns) }}{{ add(ns) }}{{ ns.v }}",
    "{% macro m(a) %}{{ caller(a * 2) }}{% endmacro %}{% call(x) m(4) %}got {{ x }}{% endcall %}",
    "{% filter upper %}abc {{ s }}{% endfilter %}",
    "{% for x in l %}{% set y = x * 2 %}{{ y }}{% endfor %}[{{ y }}]",
    "{% set x = 5 %}{% for i in [1] %}{{ x }}{% set x = 6 %}{{ x }}{% endfor %}{{ x }}",
    "{% for m in msgs if m.role != 'system' %}{{ loop.index }}{{ m.role[0] }}{% endfor %}",
    "  {# lstrip comment #}\nA\n{% if t %}  \n{% endif %}B",
    "A\n\n  {%- if t %}\n\n  B  \n  {% endif -%}\n\nC",
    "{% if t %}\n    {{ 'x' }}\n{% endif %}",
    "{%- set v = 1 -%}\n{{ v }}\n{%- if v %}\n  yes\n{%- endif %}\n",
    "{% for i in range(2) %}{% for j in range(2) %}{% if j %}{% break %}{% endif %}{{ i }}{{ j }}{% endfor %}{% endfor %}",
    "{% if false %}a{% elif none %}b{% elif 0 %}c{% else %}d{% endif %}",
    "{% set d2 = {'a': 1, 'b': {'c': [1, 2]}} %}{{ d2.b.c[1] }}{{ d2['b']['c'] | length }}",
    "{{ msgs | map(attribute='role') | join(',') }} {{ msgs | selectattr('tool_calls', 'defined') | list | length }}",
    "{{ msgs[2].tool_calls[0].function.arguments | tojson(indent=4) }}",
    "{{ items | map(attribute='name') | map('upper') | join }}",
    "{{ 'a,b' ~ ',' ~ 'c' | upper }} {{ 1 + 2 | string if false else 'no' }}",
    "{{ -2 ** 2 }} {{ (-2) ** 2 }} {{ 2 ** 3 ** 2 }} {{ not 1 == 2 }} {{ 1 if 1 else 2 if 3 else 4 }}",
    "{{ [1, 2, 3][1:] | sum }} {{ l | map('string') | join('+') }} {{ range(3) | list | tojson }}",
    "{% set t1 = (1, 'a') %}{{ t1[1] }} {{ t1 | length }} {{ t1 + (2,) }}",
    "{{ 'Hello %s, you are %d' % ('Bob', 30) }}|{{ '%r' % 'x' }}|{{ '%-5s|' % 'ab' }}",
    "{{ '' or none or 0 or [] or 'last' }} {{ 1 and 2 and 3 }}",
    "{{ d | dictsort(by='value') if false else 'skip' }} {{ {'b': 2, 'a': 1} | dictsort }}",
    "{% for k, v in {'x': 1, 'y': 2} | dictsort(reverse=true) %}{{ k }}{{ v }}{% endfor %}",
    "{{ ['b', 'a'] | sort | first }} {{ [] | first }}|{{ [] | last }}|{{ none | default('n') }}",
    "{{ '  multi\n  line ' | trim }} {{ 'a b c' | replace(' ', '') }} {{ 3 | float }} {{ '1e3' | float }}",
    "{{ 'abc'[1:] ~ 'abc'[:-1] ~ 'abc'[::-2] }}",
    "{% set s2 = 'x' %}{% set s2 = s2 + 'y' %}{{ s2 }}",
    "{{ 'x' if 'a' in 'abc' and not 'z' in 'abc' else 'y' }}",
    "{% for x in [3, 1, 2] | sort %}{{ x }}{% if not loop.last %}, {% endif %}{% endfor %}",
    "{{ (messages is defined) }} {{ msgs is defined and msgs | length > 0 }}",
    "{{ l | tojson(indent='\t') }}",
    "{{ {'a': none, 'b': true, 'c': 1.0, 'd': [], 'e': {}} | tojson }}",
    "{{ 12345678901234 * 1000 }} {{ big // 7 }} {{ big % 7 }} {{ -big }}",
    "{{ 10 / 4 }} {{ 10 // 4 }} {{ 10.0 // 4 }} {{ -10.5 // 4 }} {{ 10 % -3 }} {{ 5.5 % 2 }}",
    "{{ 'é' < 'z' }} {{ 'Z' < 'a' }} {{ [1, 'a'] == [1, 'a'] }} {{ {'a': 1} == {'a': 1} }} {{ (1, 2) == [1, 2] }}",
    "{{ 'abc' | list }} {{ {'k': 1} | list }} {{ 'ab' | batch(1) | list }}",
    "{{ 'hello'.find('l', 3) }} {{ 'hello'.count('l', 0, 3) }} {{ 'hello'.startswith('l', 2) }} {{ 'hello'.endswith('l', 0, 4) }}",
    "{{ 'a-b-c'.split('-', -1) }} {{ ' a b '.split(' ') }} {{ 'a\tb\nc'.split() }} {{ 'aXbXc'.rsplit('X') }}",
    "{{ 'ab'.title() }} {{ \"they're bill's\".title() }} {{ 'ABC def'.capitalize() }} {{ 'hello world' | capitalize }}",
    "{{ '{0}{1}{0}'.format('a', 'b') }} {{ '{{literal}} {}'.format(1) }}",
    "{{ 'x' ~ 1.0 ~ 1e20 ~ 0.5 ~ -0.0 }}",
    "{% for i in range(3) %}{{ loop.revindex }}{% else %}never{% endfor %}",
    "{{ msgs[0] }}",
    "{{ undefinedvar is none }} {{ undefinedvar is string }} {{ undefinedvar is mapping }} {{ undefinedvar | string }}|",
    "{{ undefinedvar[0] }}|{{ z.x }}|{{ n.x }}|",
    "{{ undefinedvar['x'] }}",
    "{{ z.x() }}",
    "{{ undefinedvar() }}",
    "{{ 5() }}",
    "{{ l[1:2:0] }}",
    "{% for a, b in l %}{% endfor %}",
    "{{ '%d' % 'x' }}",
    "{{ '{}'.format() }}",
    "{{ ','.join([1, 2]) }}",
    "{{ d | dictsort(by='x') }}",
    "{{ none | tojson }}{{ undefinedvar | tojson }}",
    "{{ range(1, 2, 0) }}",
    "{{ [1, 2] | sum(start='') }}",
    "{{ 'a' < none }}",
    "{% for x in none %}{% endfor %}",
    "{% macro m(a, a) %}{% endmacro %}",
    "{% set %}",
    "{% for %}",
    "{{ }}",
    "{{ a b }}",
    "{% if x %}{% else %}{% else %}{% endif %}",
    "{% break %}",
    "[{{ '\\u3000 x\\xa0\\u2028'.strip() }}][{{ '\u00e9\u00e9x\u00e9'.strip('\u00e9') }}][{{ '\\u2003y' | trim }}][{{ '\U0001F600z\U0001F600'.rstrip('\U0001F600') }}]",
    "{{ t[1:] }}",
    "{{ l['a'[::-1]] }}|{{ [undefinedvar, 1] }}|{{ '123' is upper }} {{ 'AB' | list is upper }} {{ 'ab1' is lower }}",
    "{{ d | nofilter if false else 'skip' }}{% if false %}{{ x | nofilter }}{{ x is nosuchtest }}{% endif %}ok",
    "{% if true %}{{ x | nofilter }}{% endif %}",
    "{% for x in l %}{{ x | nofilter }}{% endfor %}",
    "{{ undefinedvar | map('nofilter') | list }} {{ [] | select('nosuchtest') | list }} {{ '%u%%' % 5 }}",
    "{{ (1, 2) }} {{ (1,) }} {{ () }} {{ (1, 2) | tojson }} {{ 1 in (1, 2) }}",
    "{{ 'a' * -1 }}|{{ [1] * 0 }}",
    "{{ {'a': 1}['a'] }} {{ {1: 'x', 'k': none}[1] }} {{ {1: 'x'} | tojson }}",
    "{{ [1, [2, [3]]] | tojson }} {{ 'x\u2028y\x00' | tojson }} {{ 'tab\there' }}",
    "{{ ['\u200b', '\xa0', 'é', '\x7f', \"'\"] }}",
    "{{ 0.1 + 0.2 }} {{ 1e100 }} {{ 1 / 7 }} {{ 2 ** 0.5 }} {{ 100000000000000000.0 }} {{ 0.0001 }} {{ 0.00001 }}",
    "{% for x in msgs %}{{ x.role }}{% if not loop.last %},{% endif %}{% endfor %}",
    "{%- for m in msgs -%}\n  {%- if m.tool_calls -%}\n    {{- m.tool_calls[0].function.arguments | tojson -}}\n  {%- endif -%}\n{%- endfor -%}",
]


def main():
    out = []
    for src in CASES:
        case = {"template": src}
        try:
            case["rendered"] = env.from_string(src).render(**CTX)
        except Exception as e:  # noqa: BLE001 -- any error: ours must fail too
            case["error"] = f"{type(e).__name__}: {e}"
        out.append(case)
    json.dump({"jinja2": jinja2.__version__, "context": CTX, "cases": out}, __import__("sys").stdout,
              ensure_ascii=False, indent=1)


main()
