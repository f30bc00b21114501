/*
 * Is the element with this bid actionable now, and if not, can it become so soon?
 *
 * One call answers what Playwright's actionability checks (1.44, `injectedScript.ts`) would
 * otherwise poll for until their time-out: attached, visible, enabled, editable, stable, and
 * for pointer actions the element that receives events at the click point. The visibility,
 * disabled, read-only and "button-link"/"follow-label" rules are Playwright's. Where the answer
 * is "no", the reason is given in words, and `transient` says whether waiting can help: only
 * when the element, one of its ancestors or the element covering it is animating (Web/CSS
 * animations or jQuery effects). Everything else (display:none, disabled, covered by a still
 * element, a bid that is not on the page) fails at once. A pointer action first waits (bounded)
 * for the page's finite animations and jQuery effects to end, wherever they are (an accordion
 * opening above a button moves the button), then until the element has kept its place for an
 * animation frame whenever anything on the page still animates.
 *
 * For pointer actions the element is first scrolled into view if needed (as Playwright's
 * `DOM.scrollIntoViewIfNeeded`) and the click point is the centre of its first client rect
 * clipped to the viewport (Playwright: the centre of its first content quad, clipped).
 *
 * Returns {ok: true, x, y, already} or {ok: false, code, reason, transient}.
 * `timeout_ms`: how long to keep re-checking transient states (one animation frame apart).
 */
async function element_actionability(bid, action, bid_attr, timeout_ms) {
    const POINTER = new Set(["click", "dblclick", "hover", "check", "uncheck"]);
    const NEEDS_ENABLED = new Set(["click", "dblclick", "check", "uncheck", "fill", "clear", "select_option"]);
    const NEEDS_EDITABLE = new Set(["fill", "clear"]);
    const NEEDS_VISIBLE = new Set([...POINTER, "fill", "clear", "select_option"]);
    const ARIA_DISABLED_ROLES = new Set(["application", "button", "composite", "gridcell", "group", "input",
        "link", "menuitem", "scrollbar", "separator", "tab", "checkbox", "columnheader", "combobox", "grid",
        "listbox", "menu", "menubar", "menuitemcheckbox", "menuitemradio", "option", "radio", "radiogroup",
        "row", "rowheader", "searchbox", "select", "slider", "spinbutton", "switch", "tablist", "textbox",
        "toolbar", "tree", "treegrid", "treeitem"]);
    const name = `element ${bid}`;

    const parentOrHost = (el) => {
        if (el.parentElement) return el.parentElement;
        const root = el.parentNode;
        return root && root.nodeType === 11 && root.host ? root.host : null;
    };
    const findAll = () => {
        const selector = `[${bid_attr}="${CSS.escape(bid)}"]`;
        const found = [...document.querySelectorAll(selector)];
        if (found.length) return found;
        // Playwright's test-id selector pierces open shadow roots: look there too.
        const walk = (root) => {
            for (const el of root.querySelectorAll("*")) {
                if (el.shadowRoot) {
                    found.push(...el.shadowRoot.querySelectorAll(selector));
                    walk(el.shadowRoot);
                }
            }
        };
        walk(document);
        return found;
    };
    const retarget = (el, behavior) => {
        if (!el.matches("input, textarea, select") && !el.isContentEditable) {
            if (behavior === "button-link") el = el.closest("button, [role=button], a, [role=link]") || el;
            else el = el.closest("button, [role=button], [role=checkbox], [role=radio]") || el;
        }
        if (behavior === "follow-label") {
            if (!el.matches("input, textarea, button, select, [role=button], [role=checkbox], [role=radio]")
                && !el.isContentEditable) el = el.closest("label") || el;
            if (el.nodeName === "LABEL") el = el.control || el;
        }
        return el;
    };
    const whyInvisible = (el) => {  // Playwright's isElementVisible, with the reason
        const style = getComputedStyle(el);
        if (style.display === "contents") {
            for (let c = el.firstChild; c; c = c.nextSibling) {
                if (c.nodeType === 1 && !whyInvisible(c)) return null;
                if (c.nodeType === 3) {
                    const range = document.createRange();
                    range.selectNode(c);
                    const r = range.getBoundingClientRect();
                    if (r.width > 0 && r.height > 0) return null;
                }
            }
            return "it has no visible content";
        }
        if (!el.checkVisibility({checkOpacity: false, checkVisibilityCSS: false})) {
            for (let a = el; a; a = parentOrHost(a)) {
                if (getComputedStyle(a).display === "none") {
                    return a === el ? "display: none" : `display: none on ${describe(a)}`;
                }
            }
            return "it is not rendered";
        }
        if (style.visibility !== "visible") return `visibility: ${style.visibility}`;
        const rect = el.getBoundingClientRect();
        if (!(rect.width > 0 && rect.height > 0)) return "it has zero size";
        return null;
    };
    const ariaRole = (el) => (el.getAttribute("role") || "").split(" ")[0] ||
        ({BUTTON: "button", INPUT: "textbox", SELECT: "combobox", TEXTAREA: "textbox", OPTION: "option", A: "link"})[el.nodeName] || "";
    const disabled = (el) => {
        if (["BUTTON", "INPUT", "SELECT", "TEXTAREA", "OPTION", "OPTGROUP"].includes(el.nodeName)) {
            if (el.hasAttribute("disabled") || el.closest("fieldset[disabled]")) return true;
        }
        for (let a = el; a; a = parentOrHost(a)) {
            if (ARIA_DISABLED_ROLES.has(ariaRole(a))) {
                const v = (a.getAttribute("aria-disabled") || "").toLowerCase();
                if (v === "true") return true;
                if (v === "false") return false;
            }
        }
        return false;
    };
    const describe = (el) => {
        const b = el.getAttribute && el.getAttribute(bid_attr);
        if (b) return `element ${b}`;
        const id = el.id ? `#${el.id}` : "";
        return `<${el.nodeName.toLowerCase()}${id}>`;
    };
    const coverName = (el) => {  // the nearest ancestor-or-self that has a bid, else the tag
        for (let a = el; a; a = parentOrHost(a)) {
            const b = a.getAttribute && a.getAttribute(bid_attr);
            if (b) return `element ${b}`;
        }
        return describe(el);
    };
    const animating = (els) => {  // a running animation or jQuery effect on these or their ancestors
        const chain = new Set();
        for (const el of els) for (let a = el; a; a = parentOrHost(a)) chain.add(a);
        for (const anim of document.getAnimations()) {
            if (anim.playState === "running" && anim.effect && chain.has(anim.effect.target)) return true;
        }
        const timers = window.jQuery && window.jQuery.timers;
        if (timers && timers.length) {
            for (const t of timers) if (chain.has(t.elem)) return true;
        }
        return false;
    };
    const jqueryEffects = () => Boolean(window.jQuery && window.jQuery.timers && window.jQuery.timers.length);
    const pageAnimating = () =>  // any running animation or jQuery effect, wherever it is
        jqueryEffects() || document.getAnimations().some((anim) => anim.playState === "running");
    const pageSettling = () =>  // ... that will end (a spinner that runs forever never settles)
        jqueryEffects() || document.getAnimations().some((anim) => anim.playState === "running"
            && anim.effect && anim.effect.getComputedTiming().endTime !== Infinity);
    const clickPoint = (el) => {
        const w = innerWidth, h = innerHeight;
        for (const r of el.getClientRects()) {
            const x0 = Math.min(Math.max(r.left, 0), w), x1 = Math.min(Math.max(r.right, 0), w);
            const y0 = Math.min(Math.max(r.top, 0), h), y1 = Math.min(Math.max(r.bottom, 0), h);
            if ((x1 - x0) * (y1 - y0) > 0.99) return {x: (x0 + x1) / 2, y: (y0 + y1) / 2};
        }
        return null;
    };
    const hitAt = (point) => {  // Playwright's expectHitTarget, descending through open shadow roots
        let hit = document.elementFromPoint(point.x, point.y);
        while (hit && hit.shadowRoot) {
            const inner = hit.shadowRoot.elementFromPoint(point.x, point.y);
            if (!inner || inner === hit) break;
            hit = inner;
        }
        return hit;
    };
    const fail = (code, reason, transient) => ({ok: false, code, reason, transient});

    const checkOnce = () => {
        const found = findAll();
        if (!found.length) return fail("missing", `Could not find element with bid "${bid}"`, false);
        if (found.length > 1) return fail("ambiguous", `${found.length} elements have bid "${bid}"`, false);
        const el = found[0];
        const control = retarget(el, "follow-label");
        let already = false;
        if (action === "check" || action === "uncheck") {  // Playwright asks this first, of any element
            let checked = null;
            if (control.nodeName === "INPUT" && ["checkbox", "radio"].includes(control.type)) checked = control.checked;
            else if (["checkbox", "radio", "switch", "menuitemcheckbox", "menuitemradio", "option", "treeitem"]
                     .includes(control.getAttribute("role") || "")) {
                checked = (control.getAttribute("aria-checked") || "").toLowerCase() === "true";
            }
            if (checked === null) return fail("notcheckbox", `${name} is not a checkbox or radio button`, false);
            already = checked === (action === "check");
            if (already) return {ok: true, already: true};  // nothing to do, visible or not
        }
        if (NEEDS_VISIBLE.has(action)) {
            const why = whyInvisible(el);
            if (why) return fail("hidden", `${name} is not visible (${why})`, animating([el]));
        }
        if (NEEDS_ENABLED.has(action) && disabled(control)) {
            return fail("disabled", control === el ? `${name} is disabled` : `${name} is disabled (its control ${describe(control)} is)`,
                        animating([el]));
        }
        if (NEEDS_EDITABLE.has(action) && ["INPUT", "TEXTAREA", "SELECT"].includes(control.nodeName)
            && control.hasAttribute("readonly")) {
            return fail("readonly", `${name} is read-only`, false);
        }
        if (!POINTER.has(action)) return {ok: true, already};
        const before = el.getBoundingClientRect();
        const inView = before.top >= 0 && before.left >= 0 && before.bottom <= innerHeight && before.right <= innerWidth;
        if (!inView) el.scrollIntoViewIfNeeded ? el.scrollIntoViewIfNeeded(true) : el.scrollIntoView({block: "center"});
        const point = clickPoint(el);
        if (!point) return fail("outside", `${name} is outside of the viewport`, animating([el]));
        const target = retarget(el, "button-link");
        const hit = hitAt(point);
        let a = hit;
        while (a && a !== target) a = parentOrHost(a);
        if (!a) {
            const by = hit ? coverName(hit) : "nothing";
            return fail("covered", `${name} is covered by ${by}`, animating(hit ? [el, hit] : [el]));
        }
        // Playwright clicks only once the element has kept its place for an animation frame.
        // An element moves when it or an ancestor animates, and also when anything else on the
        // page does (an accordion opening above a button pushes it down): while nothing on the
        // page animates, nothing moves and no frame is waited for.
        return {ok: true, x: point.x, y: point.y, already, moving: animating([el]) || pageAnimating()};
    };

    const frame = () => new Promise((resolve) => {
        let settled = false;
        const done = () => { if (!settled) { settled = true; resolve(); } };
        requestAnimationFrame(done);
        // Pages without animation frames (hidden tabs) get a timer instead. Not a visible page: on a
        // busy machine the timer can beat the next frame, and an element read twice within one frame
        // looks still while it moves (the click then lands where it was).
        if (document.visibilityState !== "visible") setTimeout(done, 50);
    });
    const deadline = performance.now() + timeout_ms;
    // A pointer action waits (bounded) for the page's finite animations to end: an accordion
    // opening above a button moves it, and a rect read twice one frame apart can look still
    // while it moves (our frame callback may run before the animation's own in that frame), so
    // the click would land where the button was. Played again, the same click could then hit.
    while (POINTER.has(action) && pageSettling() && performance.now() < deadline) await frame();
    for (;;) {
        let result = checkOnce();
        if (result.ok && result.moving) {
            const el = findAll()[0];
            const r0 = el.getBoundingClientRect();
            await frame();
            const r1 = el.isConnected ? el.getBoundingClientRect() : null;
            if (r1 && r0.top === r1.top && r0.left === r1.left && r0.width === r1.width && r0.height === r1.height) {
                result = checkOnce();  // it kept its place for a frame: where is it now?
                if (result.ok) return result;
            } else {
                result = fail("moving", `${name} is moving`, true);
            }
        }
        if (result.ok || !result.transient || performance.now() >= deadline) return result;
        await frame();
    }
}
