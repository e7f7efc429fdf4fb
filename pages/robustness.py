"""Robustness battery: typos, word edits, look-alike letters, reworded instructions,
shuffled options and memorization (RTI) on multiple-choice questions."""

import streamlit as st

from dbpa_core.attacks.items import FORMATS, ItemsError, parse_items_text
from dbpa_core.attacks.sample import DATASETS
from dbpa_core.launcher import MissingExtraError, require_extra
from dbpa_core.spec import model_label
from ui import attack_figures as figs
from ui import battery, demo_runs, export, runner, state, widgets

KEY = "robustness"
widgets.page_setup()
for k, v in battery.DEFAULTS.items():
    st.session_state.setdefault(k, v)
verdict = widgets.page_intro(
    "Robustness battery: do typos, reworded instructions or shuffled options change the answers?",
    "The model answers multiple-choice questions clean and under "
    "attack: <b>typos</b>, <b>word edits</b> and <b>look-alike letters</b> (what users type, "
    "dictate or scan), <b>reworded instructions</b> and <b>shuffled options</b>. <b>ER</b>: share "
    "answered wrongly. <b>ASR</b>: share whose answer changed under the attack. <b>RTI</b>: how "
    "much of the passage must be destroyed before the answer changes — near 1, the answer does "
    "not depend on the passage: memorized data if it is right, an unread passage if it is "
    "wrong.",
)
try:
    require_extra("battery")
except MissingExtraError as exc:  # installed without the battery's packages
    st.error(str(exc))
    st.stop()

ss = st.session_state
left, right = st.columns(2, gap="large")
with left:
    st.markdown("**Data**")
    source = st.radio(
        "Items",
        ["Sample data set", "Upload a file"],
        key="w_bat_data",
        horizontal=True,
        label_visibility="collapsed",
    )
    items = None
    data_error = None
    if source == "Sample data set":
        c1, c2 = st.columns([1, 3])
        c1.number_input("Items per set", 1, 50, key="w_bat_per_set")
        c2.multiselect(
            "Sample data sets",
            list(DATASETS),
            key="w_bat_sets",
            help="Made by the project from templates: bAbI-style deduction and "
            "induction, true/false questions, arithmetic word problems.",
        )
    else:
        up = st.file_uploader(
            "Items: our JSONL, or a StrategyQA, AQuA, CREAK, GSM8K, e-SNLI or bAbI file",
            type=["jsonl", "json", "csv", "txt"],
            key="bat_upload",
            help='JSONL: one {"id", "instruction", "passage", "question", '
            '"options": [...], "answer"} per line; answer = a letter or the '
            "option's exact text (see the manual: The robustness battery).",
        )
        c1, c2 = st.columns(2)
        fmt = c1.selectbox("Format", ["auto", *FORMATS], key="w_bat_format")
        limit = c2.number_input("Use the first … items (0: all)", 0, 100_000, key="w_bat_limit")
        if up is None:
            data_error = "Upload a file of items, or use the sample data set."
        else:
            try:
                items = parse_items_text(
                    up.getvalue().decode("utf-8"), source=up.name, format=fmt, limit=int(limit) or None
                )
            except UnicodeDecodeError:
                data_error = f"{up.name} is not UTF-8 text."
            except ItemsError as exc:
                data_error = str(exc)
            else:
                st.caption(f"{len(items)} items read from {up.name}.")
with right:
    st.markdown("**Consistency and memorization**")
    c1, c2 = st.columns([3, 2])
    c1.checkbox(
        "Five synonymous instructions",
        key="w_bat_instr",
        help='SPEC §2: no instruction, and four rewordings of "choose the right option".',
    )
    c2.number_input(
        "Option orders", 0, 24, key="w_bat_orders", help="The original order and random others (0 or 1: off)."
    )
    c1, c2 = st.columns([3, 2])
    c1.text_area(
        "Your own instructions (one per line)",
        key="w_bat_own",
        height=68,
        placeholder="Pick the right option and reply with its letter.",
    )
    c2.multiselect(
        "RTI for word attacks",
        ["insert", "delete", "replace"],
        key="w_bat_rti",
        help="Raises ρ by 0.1 until each answer changes: up to 10 calls per item.",
    )

st.markdown("**Attacks** — ρ is the share of words attacked (0.1: one word in ten; 1: every word)")
for level in ("char", "word", "visual"):
    c1, c2, c3 = st.columns([2, 6, 2], vertical_alignment="center")
    on = c1.checkbox(battery.LEVEL_TEXT[level], key=f"w_bat_{level}", help=battery.LEVEL_HELP[level])
    c2.multiselect(
        f"ρ of {battery.LEVEL_TEXT[level].lower()}",
        battery.RHO_CHOICES,
        key=f"w_bat_{level}_rho",
        disabled=not on,
        label_visibility="collapsed",
    )
    if level == "visual":
        c3.selectbox(
            "letters r",
            [0.1, 0.5, 0.9],
            key="w_bat_visual_letters",
            disabled=not on,
            format_func=lambda r: f"{r:.0%} of letters",
            label_visibility="collapsed",
        )
    else:
        c3.selectbox(
            "operation",
            battery.OP_CHOICES[level],
            key=f"w_bat_{level}_op",
            disabled=not on,
            label_visibility="collapsed",
            format_func=lambda op: "any operation" if op == "any" else op,
        )

left, right = st.columns(2, gap="large")
with left:
    st.markdown("**Robustness curve (DBPA)**")
    curve_on = st.checkbox(
        "ω and p of the responses at ρ = 0.1 … 1.0",
        key="w_bat_curve",
        help="Samples k responses (sidebar) per attacked prompt and tests "
        "them against the clean prompt's: a change in what the model says, "
        "told apart from sampling noise.",
    )
    c1, c2 = st.columns([3, 1])
    c1.multiselect(
        "Curve levels", ["char", "word", "visual"], key="w_bat_curve_levels", disabled=not curve_on
    )
    c2.number_input("Items", 1, 20, key="w_bat_curve_items", disabled=not curve_on)
with right:
    st.markdown("**Answers**")
    c1, c2 = st.columns(2)
    c1.number_input("Max tokens per answer", 1, 2000, key="w_bat_max_tokens")
    c2.number_input(
        "Temperature of answers",
        0.0,
        2.0,
        key="w_bat_answer_temperature",
        step=0.1,
        help="0: the most likely answer (greedy), so a change is the attack's doing.",
    )

models = runner.model_options()
model_name = widgets.pick_model(
    "Model",
    "w_bat_model",
    list(models),
    help="Add OpenAI-compatible, Hugging Face or replay models in Settings.",
)
values = {k: ss.get(k) for k in battery.DEFAULTS}
spec = None
if data_error:
    st.error(data_error, icon=":material/upload_file:")
elif source == "Sample data set" and not ss["w_bat_sets"]:
    st.error("Choose at least one sample data set.")
else:
    try:
        spec = battery.build_spec(values, state.settings(), models[model_name], items=items)
    except Exception as exc:  # noqa: BLE001 - shown as a short message
        st.error(runner.friendly(exc), icon=":material/edit_note:")
    if spec is not None and battery.wordnet_problem(spec):
        st.error(battery.wordnet_problem(spec), icon=":material/dictionary:")
        spec = None
    if spec is not None and (lacking := battery.replay_shortfall(spec)):
        st.error(lacking, icon=":material/playlist_remove:")
        spec = None


def show_estimate() -> None:
    with st.spinner("Preparing the attacked prompts…"):  # the first time loads WordNet (~3 s)
        e = battery.estimate(spec, state.cache())
    c = st.columns(4)
    c[0].metric("Answers to ask", f"{e['answers']:,}", help=f"{e['answers_cached']:,} already cached")
    c[1].metric("RTI (at most)", f"{e['rti_max']:,}", help="Stops per item at the first change")
    c[2].metric("Curve samples", f"{e['curve']:,}")
    c[3].metric(
        "Estimated cost",
        "?" if e["unknown_price"] else f"${e['cost']:,.4f}",
        help="Local and replay models cost nothing",
    )
    st.caption(f"{len(spec.items)} items ({', '.join(spec.datasets)}).")
    if check := battery.leak_check(spec):  # no model needed: the options alone
        st.caption(check)


# demo mode: the default battery's recorded run, at once (while the inputs are the defaults)
demo_runs.offer(KEY, "battery", spec, matches=lambda s, r: demo_runs.same_inputs(s, r.spec))
tasks = {"battery": battery.task(spec, state.cache(), ss["api_keys"])} if spec else None
results = runner.task_section(tasks, key=KEY, label="Run battery", before=show_estimate)
result = results.get("battery") if results else None
widgets.say_verdict(
    verdict,
    battery.summary(result) if result is not None else None,
    waiting="No verdict yet: press **Run battery** below (the sample questions take a minute "
    "on the embedded model, seconds on recorded answers).",
)
if result is not None:
    st.divider()
    if note := demo_runs.label(KEY):
        st.info(note, icon=":material/history:")
    st.subheader("Results")
    st.markdown(f"**{battery.summary(result)}**")
    for note in battery.notes(result):
        st.warning(note, icon=":material/info:")
    f = figs.battery_figures(result)
    tabs = st.tabs(
        [
            "ER / ASR",
            "Per data set",
            "RTI",
            "Robustness curve",
            "Consistency",
            "Which words",
            "Examples",
            "Answers",
            "Options",
        ]
    )
    with tabs[0]:
        t7 = battery.table7(result)
        # clean has no ASR: shown as text, since the grid writes a missing number as "None"
        t7["ASR"] = ["–" if v != v else f"{v:.3f}" for v in t7["ASR"]]
        st.dataframe(t7.style.format({"ρ": "{:g}", "ER": "{:.3f}"}), hide_index=True, key=f"{KEY}_table7")
        st.plotly_chart(f["ER and ASR per attack"], key=f"{KEY}_er_asr")
        st.caption(
            "Bars: the share of items; whiskers: 95 % Wilson intervals. Unparsed answers "
            "(no option could be read) count as wrong for ER and as a changed answer for "
            "ASR when the clean answer was readable."
        )
    with tabs[1]:
        st.dataframe(battery.dataset_table(result), hide_index=True, key=f"{KEY}_ds")
        if f["ER per data set"] is not None:
            st.plotly_chart(f["ER per data set"], key=f"{KEY}_ds_heat")
            st.plotly_chart(figs.dataset_heatmap(result, "asr"), key=f"{KEY}_ds_asr")
    with tabs[2]:
        if f["RTI"] is None:
            st.info("RTI was not asked for: choose word attacks under *RTI* above.")
        else:
            st.dataframe(battery.rti_table(result), hide_index=True, key=f"{KEY}_rti")
            st.plotly_chart(f["RTI"], key=f"{KEY}_rti_fig")
            er = result.clean().er.value
            reading = (
                "With a low clean error rate, that suggests the data set is memorized."
                if er <= 0.5
                else f"Here the clean error rate is {er:.2f}: a high RTI then says the model "
                "ignores the passage, not that it memorized the data set."
            )
            st.caption(
                "For each item ρ rises from 0.1 until the answer changes; RTI is the mean "
                "of those ρ (1: never changed). High RTI: the answer does not depend on the "
                "passage. " + reading
            )
    with tabs[3]:
        if f["Robustness curve"] is None:
            st.info("Tick *ω and p for ρ = 0.1 … 1.0* above to draw the robustness curve.")
        else:
            st.plotly_chart(f["Robustness curve"], key=f"{KEY}_curve")
            st.caption(
                "ω above chance: how much the attacked prompt's answers differ from the "
                "clean prompt's beyond the model's own randomness (0 = noise). Filled "
                f"markers: significant after {result.spec.correction} correction."
            )
    with tabs[4]:
        if f["Consistency"] is None:
            st.info("Consistency was not asked for.")
        else:
            st.plotly_chart(f["Consistency"], key=f"{KEY}_cons")
            st.dataframe(battery.consistency_table(result), hide_index=True, key=f"{KEY}_cons_t")
            st.caption(
                "Each point is the accuracy under one instruction or one option order; a "
                "consistent model's points sit together (small std)."
            )
    with tabs[5]:
        if f["Attacked words by position"] is None:
            st.info("No attack changed an answer.")
        else:
            st.plotly_chart(f["Attacked words by position"], key=f"{KEY}_pos")
            if f["Attacked words by part of speech"] is not None:
                st.plotly_chart(f["Attacked words by part of speech"], key=f"{KEY}_tag")
                st.plotly_chart(figs.patterns_figure(result, "dep"), key=f"{KEY}_dep")
            st.caption(
                "Orange: attacked words of attacks that changed the answer (each item "
                "weighs 1). Grey: all attacked words. Orange above grey: attacking such "
                "words breaks the model more often than their share says."
            )
        if result.phrases is not None:
            st.markdown("**Phrase types and what predicts a changed answer**")
            if f["Attacked words by phrase type"] is not None:
                st.plotly_chart(f["Attacked words by phrase type"], key=f"{KEY}_phrases")
                st.dataframe(battery.phrase_table(result), hide_index=True, key=f"{KEY}_phrase_t")
                st.caption(
                    "Each attacked word's phrase (NP noun, VP verb, PP prepositional, ADJP "
                    "adjective, ADVP adverb, QP quantity phrase, PRT particle, WH "
                    "wh-phrase), read from spaCy's dependency parse. Share: among the "
                    "attacked words of one attack, each attack weighing 1."
                )
            st.markdown(battery.forest_text(result))
            if f["What predicts a changed answer"] is not None:
                st.plotly_chart(f["What predicts a changed answer"], key=f"{KEY}_forest")
                st.caption(
                    "Bars: how much held-out accuracy the forest loses when one feature is "
                    f"shuffled (whiskers: sd over {result.phrases.forest.repeats} "
                    "shuffles). A feature is the share of an "
                    "attack's words in one phrase type, or the share of the text attacked. "
                    "Near 0: the forest does not need it (features it never used are "
                    "left out); read the bars only when the accuracy beats the majority "
                    "guess."
                )
    with tabs[6]:
        choices = battery.example_choices(result)
        if not choices:
            st.info("No attacked text to show.")
        else:
            labels = [f"{a} ρ = {r:g}" for a, r in choices]
            pick = st.selectbox("Attack", labels, key=f"{KEY}_ex_pick")
            attack, rho = choices[labels.index(pick)]
            st.caption(
                f"Each word is attacked with probability ρ = {rho:g}, so a passage can "
                'come through with no word changed ("0 of … words changed"): it is then '
                "the clean prompt, and its answer the clean answer."
            )
            for ex in battery.examples_html(result, attack, rho):
                st.markdown(
                    f"<div style='margin-top:.6rem'><b>{ex['item']}</b> — {ex['changed']} of "
                    f"{ex['words']} words of the {ex['field']} changed; read as "
                    f"<b>{ex['read']}</b> (right: {ex['gold']})<br>{ex['html']}</div>",
                    unsafe_allow_html=True,
                )
                st.text(ex["response"])
    with tabs[7]:
        only = st.checkbox("Only unparsed answers", key=f"{KEY}_only_unparsed")
        st.dataframe(battery.answers_table(result, only_unparsed=only), hide_index=True, key=f"{KEY}_answers")
    with tabs[8]:
        pos = result.answer_positions()
        st.dataframe(battery.positions_table(pos), hide_index=True, key=f"{KEY}_positions")
        st.caption(
            "Clean items: how many have their right option at each letter, and how "
            "often the model chose each letter. A model that answers one letter far more "
            "often than the right answers have it picks a position, not an answer."
        )
        if result.leaks:
            st.dataframe(
                battery.leak_table(result.leaks).style.format(
                    {"right": "{:.0%}", "chance": "{:.0%}", "p (Holm)": "{:.2g}"}
                ),
                hide_index=True,
                key=f"{KEY}_leaks",
            )
            st.caption(battery.LEAK_CAPTION)
    c = st.columns(4)
    stem = export.stem(result.spec.name or "battery", model_label(result.spec.model), result.created_at)
    c[0].download_button(
        "Results (CSV)",
        result.to_csv(),
        f"{stem}-results.csv",
        "text/csv",
        key=f"{KEY}_dl_csv",
        icon=":material/table:",
    )
    c[1].download_button(
        "Results (JSON)",
        result.to_json(),
        f"{stem}-results.json",
        "application/json",
        key=f"{KEY}_dl_json",
        icon=":material/data_object:",
    )
    c[2].download_button(
        "Attacked texts (JSONL)",
        result.attacked_jsonl(),
        f"{stem}-attacked.jsonl",
        "application/jsonl",
        key=f"{KEY}_dl_jsonl",
        icon=":material/chat:",
    )
    c[3].download_button(
        "Report (HTML)",
        figs.html_report(result, f),
        f"{stem}-report.html",
        "text/html",
        key=f"{KEY}_dl_html",
        icon=":material/description:",
    )
    st.caption("Each chart also downloads as PNG from the camera icon in its toolbar.")
