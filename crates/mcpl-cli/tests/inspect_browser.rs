//! `mcpl inspect`'s dashboard in a real browser: headless Chromium (Debian's `chromium`),
//! driven through `chromedriver` with fantoccini (WebDriver), against the bundled reference
//! server. It loads the page with the token, applies a narrower grant, calls a tool from the
//! form generated from its JSON Schema, and sees the receipt and the push the tool caused;
//! server text that looks like HTML stays text.
//!
//! Without chromium and chromedriver the test FAILS when `CI=true` (`.ci/run` installs
//! them) and is skipped with a printed reason otherwise. `MCPL_CHROMIUM` and
//! `MCPL_CHROMEDRIVER` override where they are looked for.

use std::io::{BufRead, BufReader};
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use fantoccini::{ClientBuilder, Locator};
use futures_util::FutureExt;
use serde_json::json;

mod inspect_support;
use inspect_support::{Inspect, WAIT};

/// The Chromium flags that work headless in a container with no network.
const CHROMIUM_FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1400,2400",
];

fn find(var: &str, candidates: &[&str]) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(var) {
        return Some(PathBuf::from(p)).filter(|p| p.exists());
    }
    candidates.iter().map(PathBuf::from).find(|p| p.exists())
}

/// Waits for what the page must show, at most [`WAIT`].
fn wait(c: &fantoccini::Client) -> fantoccini::wait::Wait<'_> {
    c.wait().at_most(WAIT)
}

/// Picks `tool` in the Tools panel, types `text` into the `text` field of the form generated
/// from its input schema, and presses Call.
async fn call_from_form(c: &fantoccini::Client, tool: &str, text: &str) {
    c.find(Locator::Id("tool-select"))
        .await
        .unwrap()
        .select_by_value(tool)
        .await
        .unwrap();
    let field = wait(c)
        .for_element(Locator::Css("#tool-form input[data-arg='text']"))
        .await
        .expect("a text field for the tool's `text` argument");
    field.clear().await.unwrap();
    field.send_keys(text).await.unwrap();
    c.find(Locator::Id("tool-call"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
}

/// The grant tree's `tools` box.
async fn tools_leaf(c: &fantoccini::Client) -> fantoccini::elements::Element {
    c.find(Locator::Css("#grant-tree input[data-path='tools']"))
        .await
        .expect("a `tools` box in the grant tree")
}

/// chromedriver, killed with the test.
struct Driver {
    child: Child,
    port: u16,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts chromedriver on a free port and waits for the line that says it listens.
fn start_driver(path: &Path) -> Driver {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap();
    let mut child = Command::new(path)
        .arg(format!("--port={port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn chromedriver");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        let n = out.read_line(&mut line).unwrap_or(0);
        assert!(n > 0, "chromedriver ended before it listened");
        if line.contains("started successfully") {
            break;
        }
    }
    // Keep draining its output so it never blocks on a full pipe.
    std::thread::spawn(move || {
        let mut sink = String::new();
        while out.read_line(&mut sink).unwrap_or(0) > 0 {
            sink.clear();
        }
    });
    Driver { child, port }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_applies_a_grant_calls_a_tool_and_shows_the_push_in_chromium() {
    let chromium = find(
        "MCPL_CHROMIUM",
        &["/usr/bin/chromium", "/usr/bin/chromium-browser"],
    );
    let driver = find("MCPL_CHROMEDRIVER", &["/usr/bin/chromedriver"]);
    let (chromium, driver_path) = match (chromium, driver) {
        (Some(c), Some(d)) => (c, d),
        _ => {
            let why = "chromium and chromedriver are needed \
                       (apt-get install -y chromium chromium-driver)";
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "under CI this test must run: {why}"
            );
            eprintln!("skipped: {why}");
            return;
        }
    };

    let insp = Inspect::start(&[]);
    let driver = start_driver(&driver_path);
    let profile = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("inspect-chromium-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&profile);
    let mut args: Vec<String> = CHROMIUM_FLAGS.iter().map(|s| (*s).to_owned()).collect();
    args.push(format!("--user-data-dir={}", profile.display()));
    let mut caps = serde_json::Map::new();
    caps.insert("browserName".into(), json!("chrome"));
    caps.insert(
        "goog:chromeOptions".into(),
        json!({ "binary": chromium, "args": args }),
    );
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    let c = ClientBuilder::new(connector)
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{}", driver.port))
        .await
        .expect("a WebDriver session");

    // The session is closed whatever happens, so chromedriver takes Chromium down with it
    // (a panic would otherwise leave the browser running).
    let outcome = AssertUnwindSafe(drive(&c, &insp)).catch_unwind().await;
    let closed = c.close().await;
    drop(driver);
    let _ = std::fs::remove_dir_all(&profile);
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
    closed.expect("the WebDriver session closes");
}

/// What a person does on the page, and what they must see.
async fn drive(c: &fantoccini::Client, insp: &Inspect) {
    let xpath = Locator::XPath;
    c.goto(&insp.url()).await.unwrap();
    wait(c)
        .for_element(xpath("//span[@id='phase' and normalize-space(.)='ready']"))
        .await
        .expect("the page shows the connection ready");
    // The tool list arrives with the state (the inspector lists the tools on connect).
    wait(c)
        .for_element(Locator::Css("#tool-select option[value='schedule_event']"))
        .await
        .expect("the tools are listed");

    // A narrower grant: every channels leaf off (its group box), applied by Request.
    c.find(Locator::Css("#grant-tree input[data-group='channels']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    c.find(Locator::Id("grant-apply"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let receipt = wait(c)
        .for_element(xpath(
            "//div[@id='receipt-box'][.//strong[normalize-space(.)='Receipt']][contains(., 'ref.chat')]",
        ))
        .await
        .expect("the receipt of the narrower grant");
    let receipt_text = receipt.text().await.unwrap();
    assert!(receipt_text.contains("accepted"), "{receipt_text}");
    assert!(receipt_text.contains("narrowed:"), "{receipt_text}");
    assert!(receipt_text.contains("channels.register"), "{receipt_text}");
    // The channel the host still holds in its table is offered no action the grant no
    // longer holds (§5.4): Publish, Stream, Close and channels/open are disabled, saying why.
    let publish = wait(c)
        .for_element(xpath(
            "//tbody[@id='channels']//button[normalize-space(.)='Publish'][@disabled]",
        ))
        .await
        .expect("Publish disabled without channels.publish");
    let why = publish.attr("title").await.unwrap().unwrap_or_default();
    assert!(why.contains("channels.publish"), "{why}");
    for name in ["Stream", "Close"] {
        let path = format!("//tbody[@id='channels']//button[normalize-space(.)='{name}']");
        let b = c.find(Locator::XPath(&path)).await.unwrap();
        assert!(!b.is_enabled().await.unwrap(), "{name} offered");
    }
    let open = c.find(Locator::Id("open-send")).await.unwrap();
    assert!(!open.is_enabled().await.unwrap(), "channels/open offered");

    // A tool called from the form generated from its input schema.
    call_from_form(c, "schedule_event", "hello from the browser").await;
    let out = wait(c)
        .for_element(xpath("//div[@id='tool-output'][contains(., 'scheduled')]"))
        .await
        .expect("the tool's result");
    assert!(out.text().await.unwrap().contains("scheduled evt"));
    // The push it caused, live.
    let push = wait(c)
        .for_element(xpath(
            "//ul[@id='events']/li[contains(@class,'push')][contains(., 'hello from the browser')]",
        ))
        .await
        .expect("the push event in the Events panel");
    assert!(push.text().await.unwrap().contains("ref:scheduled"));

    // Server text that looks like HTML is shown as text, never parsed.
    call_from_form(c, "echo", "<b id=\"injected\">bold</b>").await;
    wait(c)
        .for_element(xpath(
            "//div[@id='tool-output'][contains(., '<b id=\"injected\">')]",
        ))
        .await
        .expect("the markup shown literally");
    assert!(c
        .find_all(Locator::Id("injected"))
        .await
        .unwrap()
        .is_empty());

    // `tools` taken out of the grant (§5.4: `tools/call` needs it): the Tools panel says its
    // list is stale and offers no Call, rather than the tools the host may no longer call.
    tools_leaf(c).await.click().await.unwrap();
    c.find(Locator::Id("grant-apply"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let stale = wait(c)
        .for_element(xpath(
            "//p[@id='tools-stale'][contains(., 'stale')][contains(., 'tools')]",
        ))
        .await
        .expect("the Tools panel marked stale once `tools` is revoked");
    assert!(stale.is_displayed().await.unwrap());
    let call = c.find(Locator::Id("tool-call")).await.unwrap();
    assert!(
        !call.is_enabled().await.unwrap(),
        "Call offered without `tools`"
    );
    // Granted again: the list is fresh (listed anew) and Call is back.
    tools_leaf(c).await.click().await.unwrap();
    c.find(Locator::Id("grant-apply"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait(c)
        .for_element(xpath("//button[@id='tool-call'][not(@disabled)]"))
        .await
        .expect("Call offered again once `tools` is granted");
    assert!(!c
        .find(Locator::Id("tools-stale"))
        .await
        .unwrap()
        .is_displayed()
        .await
        .unwrap());

    // For a person to look at: the whole page as the test left it.
    if let Ok(png) = c.screenshot().await {
        let _ = std::fs::write(
            PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("inspect-dashboard.png"),
            png,
        );
    }
}
