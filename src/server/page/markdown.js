// A small Markdown renderer for model replies: fenced code blocks (an unclosed fence, as while a reply
// streams, runs to the end), headings, lists (nested by indentation), block quotes, tables, rules,
// paragraphs; inline code, bold, italic, strikethrough and http(s)/mailto links. Safe by construction:
// every piece of the source is HTML-escaped before any tag of ours is put around it, and link targets
// must start with http://, https:// or mailto: — model output cannot add markup, attributes or script.
// No syntax highlighting (nothing to bundle). Pure functions: tests/browser/markdown.test.mjs runs it
// in node.

const ESCAPES = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
export function escapeHtml(s) { return String(s).replace(/[&<>"']/g, (c) => ESCAPES[c]); }

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([\w+#.-]*)/;
const HEADING = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const RULE = /^ {0,3}([-*_])(\s*\1){2,}\s*$/;
const QUOTE = /^ {0,3}> ?/;
const ITEM = /^( *)([-*+]|\d{1,9}[.)])\s+(.*)$/;
const TABLE_RULE = /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;
const blank = (l) => /^\s*$/.test(l);
const indentOf = (l) => l.length - l.trimStart().length;

// Inline spans of one block's text (raw source in, HTML out). Code spans are cut out first (their
// content is literal), the rest is escaped, then our tags go around escaped text; \u0000 marks the
// code spans' places and cannot come from the source (removed first).
export function renderInline(text) {
  const codes = [];
  let s = String(text).replace(/\u0000/g, '');
  s = s.replace(/(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)/g, (_, _ticks, code) => {
    codes.push(`<code>${escapeHtml(code)}</code>`);
    return `\u0000${codes.length - 1}\u0000`;
  });
  s = escapeHtml(s);
  s = s.replace(/\[([^\]\n]+)\]\(([^()\s]+)\)/g, (m, label, url) =>
    /^(https?:\/\/|mailto:)/i.test(url) ? `<a href="${url}" target="_blank" rel="noopener noreferrer">${label}</a>` : m);
  s = s.replace(/\*\*(?=\S)([\s\S]*?\S)\*\*/g, '<strong>$1</strong>');
  s = s.replace(/(^|[^\w])__(?=\S)([\s\S]*?\S)__(?!\w)/g, '$1<strong>$2</strong>');
  s = s.replace(/(^|[^*\w])\*(?=[^\s*])([^*\n]*?[^\s*])?\*(?!\*)/g, (m, pre, body) => (body === undefined ? m : `${pre}<em>${body}</em>`));
  s = s.replace(/(^|[^\w])_(?=[^\s_])([^_\n]*?[^\s_])_(?!\w)/g, '$1<em>$2</em>');
  s = s.replace(/~~(?=\S)([^~\n]*?\S)~~/g, '<del>$1</del>');
  s = s.replace(/\n/g, '<br>');
  return s.replace(/\u0000(\d+)\u0000/g, (_, i) => codes[Number(i)]);
}

function codeBlock(code, lang) {
  const label = lang ? `<span class="lang">${escapeHtml(lang)}</span>` : '<span class="lang"></span>';
  return `<div class="code"><div class="code-head">${label}<button class="copy" type="button">Copy</button></div>` +
         `<pre><code>${escapeHtml(code)}</code></pre></div>`;
}

const cells = (line) => {
  let s = line.trim();
  if (s.startsWith('|')) s = s.slice(1);
  if (s.endsWith('|')) s = s.slice(0, -1);
  return s.split('|').map((c) => c.trim());
};

// A line that starts a block of its own (ends a paragraph).
const startsBlock = (l) => FENCE.test(l) || HEADING.test(l) || RULE.test(l) || QUOTE.test(l) || ITEM.test(l);

function list(lines, i, out, tight) {
  const first = ITEM.exec(lines[i]);
  const indent = first[1].length;
  const ordered = /\d/.test(first[2]);
  const items = [];
  while (i < lines.length) {
    if (blank(lines[i]) && i + 1 < lines.length) {  // a blank line between two items of this list
      const next = ITEM.exec(lines[i + 1]);
      if (next && next[1].length === indent && /\d/.test(next[2]) === ordered) { i++; continue; }
    }
    const m = ITEM.exec(lines[i]);
    if (!m || m[1].length !== indent || /\d/.test(m[2]) !== ordered) break;
    const body = [m[3]];
    const contentIndent = indent + m[2].length + 1;
    for (i++; i < lines.length; i++) {
      const l = lines[i];
      if (blank(l)) {
        if (i + 1 < lines.length && !blank(lines[i + 1]) && indentOf(lines[i + 1]) > indent) { body.push(''); continue; }
        break;
      }
      if (indentOf(l) <= indent) break;  // the next item, or the list is over
      body.push(l.slice(Math.min(indentOf(l), contentIndent)));
    }
    items.push(body);
  }
  const tag = ordered ? 'ol' : 'ul';
  const start = ordered && parseInt(first[2], 10) !== 1 ? ` start="${parseInt(first[2], 10)}"` : '';
  out.push(`<${tag}${start}>${items.map((b) => `<li>${blocks(b, true)}</li>`).join('')}</${tag}>`);
  return i;
}

// Block structure of `lines` → HTML. tight: paragraphs without <p> (inside a list item).
function blocks(lines, tight = false) {
  const out = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    let m;
    if ((m = FENCE.exec(line))) {
      const close = new RegExp(`^ {0,3}${m[1][0] === '`' ? '`' : '~'}{${m[1].length},}\\s*$`);
      const body = [];
      for (i++; i < lines.length && !close.test(lines[i]); i++) body.push(lines[i]);
      i++;
      out.push(codeBlock(body.join('\n'), m[2]));
    } else if (blank(line)) {
      i++;
    } else if ((m = HEADING.exec(line))) {
      const n = m[1].length;
      out.push(`<h${n}>${renderInline(m[2])}</h${n}>`);
      i++;
    } else if (RULE.test(line)) {
      out.push('<hr>');
      i++;
    } else if (QUOTE.test(line)) {
      const body = [];
      for (; i < lines.length && QUOTE.test(lines[i]); i++) body.push(lines[i].replace(QUOTE, ''));
      out.push(`<blockquote>${blocks(body)}</blockquote>`);
    } else if (ITEM.test(line)) {
      i = list(lines, i, out, tight);
    } else if (line.includes('|') && i + 1 < lines.length && TABLE_RULE.test(lines[i + 1]) && lines[i + 1].includes('-')) {
      const head = cells(line);
      const rows = [];
      for (i += 2; i < lines.length && lines[i].includes('|') && !blank(lines[i]); i++) rows.push(cells(lines[i]));
      const tr = (r, t) => `<tr>${r.map((c) => `<${t}>${renderInline(c)}</${t}>`).join('')}</tr>`;
      out.push(`<div class="table"><table><thead>${tr(head, 'th')}</thead><tbody>${rows.map((r) => tr(r, 'td')).join('')}</tbody></table></div>`);
    } else {
      const para = [line];
      for (i++; i < lines.length && !blank(lines[i]) && !startsBlock(lines[i]); i++) para.push(lines[i]);
      const html = renderInline(para.join('\n'));
      out.push(tight ? html : `<p>${html}</p>`);
    }
  }
  return out.join('');
}

export function renderMarkdown(source) { return blocks(String(source).replace(/\r\n?/g, '\n').split('\n')); }
