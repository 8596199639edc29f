// The chat page's Markdown renderer (src/server/page/markdown.js) in node, no browser: the block and
// inline forms models write, and that no input produces markup of its own (script, event handlers,
// javascript: links). Expected HTML is written out by hand.
// Run: node --test tests/browser/markdown.test.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { renderMarkdown as md, renderInline } from '../../src/server/page/markdown.js';

test('paragraphs, headings, emphasis, inline code, links', () => {
  assert.equal(md('# Title\n\nSome **bold**, *it*, _it_, ~~gone~~ and `a<b`.\nNext line.'),
               '<h1>Title</h1><p>Some <strong>bold</strong>, <em>it</em>, <em>it</em>, <del>gone</del> and <code>a&lt;b</code>.<br>Next line.</p>');
  assert.equal(renderInline('[docs](https://x.org/a?b=1&c=2)'),
               '<a href="https://x.org/a?b=1&amp;c=2" target="_blank" rel="noopener noreferrer">docs</a>');
  assert.equal(renderInline('2 * 3 * 4 and snake_case_name'), '2 * 3 * 4 and snake_case_name');
  assert.equal(renderInline('`**not bold**`'), '<code>**not bold**</code>');
});

test('fenced code, closed and still streaming', () => {
  const head = '<div class="code"><div class="code-head"><span class="lang">py</span><button class="copy" type="button">Copy</button></div>';
  assert.equal(md('```py\nif a < b:\n    print("x")\n```\nafter'),
               `${head}<pre><code>if a &lt; b:\n    print(&quot;x&quot;)</code></pre></div><p>after</p>`);
  assert.equal(md('```py\nunclosed *x*'), `${head}<pre><code>unclosed *x*</code></pre></div>`);
});

test('lists (nested, ordered), quotes, rules, tables', () => {
  assert.equal(md('- a\n- b\n  - c\n\n1. one\n2. two'),
               '<ul><li>a</li><li>b<ul><li>c</li></ul></li></ul><ol><li>one</li><li>two</li></ol>');
  assert.equal(md('3. three\n4. four'), '<ol start="3"><li>three</li><li>four</li></ol>');
  assert.equal(md('> quoted\n> more\n\n---'), '<blockquote><p>quoted<br>more</p></blockquote><hr>');
  assert.equal(md('| a | b |\n|---|:-:|\n| 1 | **2** |'),
               '<div class="table"><table><thead><tr><th>a</th><th>b</th></tr></thead>' +
               '<tbody><tr><td>1</td><td><strong>2</strong></td></tr></tbody></table></div>');
});

test('model output cannot make markup', () => {
  const attacks = [
    '<script>alert(1)</script>', '<img src=x onerror=alert(1)>', '[x](javascript:alert(1))',
    '[x](JaVaScRiPt:alert(1))', '[x](data:text/html,<script>)', '[a"b](https://x.org/"onmouseover="alert(1))',
    '```"><script>alert(1)</script>\ncode\n```', '`</code><script>`', '\u00000\u0000 <b>', '# <iframe src=x>',
    '| <svg onload=alert(1)> |\n|---|\n| <a href=x> |', '- <style>*{}</style>', '**<u>x</u>**',
  ];
  for (const a of attacks) {
    const html = md(a);
    // Every tag in the output is one of the renderer's own, with only its own attributes.
    for (const tag of html.match(/<[^>]*>/g) ?? []) {
      assert.match(tag, /^<\/?(p|br|h[1-6]|strong|em|del|code|pre|ul|ol|li|blockquote|hr|div|span|button|table|thead|tbody|tr|th|td|a)( (class|type|start|href|target|rel)="[^"<>]*")*>$/, `${a} → ${html}`);
      if (tag.startsWith('<a ')) assert.match(tag, /href="(https?:\/\/|mailto:)/, `${a} → ${html}`);
    }
    assert.doesNotMatch(html, /<(script|img|iframe|svg|style|u|b)\b/i, `${a} → ${html}`);
  }
  assert.equal(md('<img src=x onerror=alert(1)>'), '<p>&lt;img src=x onerror=alert(1)&gt;</p>');
});
