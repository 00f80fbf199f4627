"""Request texts that are hard on a tokenizer, for measuring characters per token (slm_router/budget.py)."""

from __future__ import annotations

ENGLISH = (
    "Our quarterly report covers revenue, churn and the hiring plan. Revenue grew eleven percent over the "
    "previous quarter, mostly from the enterprise tier, while churn in the self-service tier stayed flat. "
    "The team would like a short summary that a busy executive can read in two minutes, with the three "
    "numbers that matter most and one sentence on what we will do differently next quarter. "
)
PYTHON = """def median_by_column(path: str) -> dict[str, float]:
    import csv, statistics
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    out: dict[str, float] = {}
    for key in rows[0]:
        values = [float(r[key]) for r in rows if r[key].strip()]
        out[key] = statistics.median(values) if values else float("nan")
    return out

assert median_by_column("t.csv") == {"a": 2.0, "b": 3.5}, "median mismatch"
"""
JSON = (
    '{"id":"9f1c2e7a-44b1-4c0e-9a4e-3f2d1b0c8e77","ts":"2026-11-23T19:55:01.123Z","user":{"id":48213,"roles":["admin","ops"],'
    '"quota":{"rpm":600,"tpm":120000}},"items":[{"sku":"A-1029","qty":3,"price":19.99},{"sku":"B-77","qty":1,"price":249.0}],'
    '"flags":{"beta":true,"region":"eu-west-1","retries":[0,125,250,500]}}\n'
)
GERMAN = (
    "Bitte übersetzen Sie den folgenden Absatz ins Englische und achten Sie dabei auf die Fachbegriffe: "
    "Die Geschäftsführung hat beschlossen, die Rechenzentrumskapazitäten im kommenden Haushaltsjahr zu "
    "erweitern, wobei die Energieeffizienz und die Ausfallsicherheit Vorrang vor den Anschaffungskosten haben. "
)
RUSSIAN = (
    "Пожалуйста, кратко объясните разницу между процессом и потоком в операционной системе, приведите "
    "пример, когда лучше использовать несколько процессов, а когда достаточно потоков, и упомяните, как "
    "это связано с глобальной блокировкой интерпретатора в Python. Ответ нужен для студентов второго курса. "
)
CHINESE = (
    "请用简单的语言解释一下机器学习中的过拟合现象，并举一个日常生活中的例子说明。另外，请列出三种常见的"
    "防止过拟合的方法，例如正则化、交叉验证和提前停止，并分别说明它们的基本原理和适用场景。回答请控制在三百字以内。"
)
JAPANESE = (
    "次の文章を丁寧な日本語に書き直してください。来週の会議は月曜日の午後三時から始まります。資料は前日までに"
    "共有フォルダに置いておいてください。質問がある場合は、担当者に直接メールで連絡してください。よろしくお願いします。"
)

UKRAINIAN = (
    "Будь ласка, поясніть простими словами різницю між процесом і потоком в операційній системі та наведіть "
    "приклад із щоденного користування комп'ютером. "
)
GREEK = (
    "Παρακαλώ εξηγήστε με απλά λόγια τη διαφορά ανάμεσα σε μια διεργασία και ένα νήμα στο λειτουργικό σύστημα, "
    "και δώστε ένα παράδειγμα από την καθημερινή χρήση ενός υπολογιστή. "
)
EMOJI = "🙂🚀🔥 great job team!!! 🎉🎉 see you at 10:30 👋 #launch @ops 😅 "
ARABIC = "من فضلك اشرح بكلمات بسيطة الفرق بين العملية والخيط في نظام التشغيل، وأعط مثالا من الاستخدام اليومي للحاسوب. "
HINDI = "कृपया सरल शब्दों में ऑपरेटिंग सिस्टम में प्रक्रिया और थ्रेड के बीच अंतर समझाइए और कंप्यूटर के रोज़मर्रा के उपयोग से एक उदाहरण दीजिए। "
KOREAN = "다음 문장을 정중한 한국어로 바꿔 주세요. 다음 주 회의는 월요일 오후 세 시에 시작합니다. 자료는 전날까지 공유 폴더에 올려 주세요. "

# Texts the budget's CHARS_PER_TOKEN must hold for, and scripts it knowingly does not (denser: a long request's
# classification is retried on a shorter head and tail).
COVERED = {
    "english": ENGLISH,
    "python": PYTHON,
    "json": JSON,
    "german": GERMAN,
    "russian": RUSSIAN,
    "ukrainian": UKRAINIAN,
    "greek": GREEK,
    "emoji": EMOJI,
}
NOT_COVERED = {"arabic": ARABIC, "hindi": HINDI, "chinese": CHINESE, "japanese": JAPANESE, "korean": KOREAN}


def repeated(text: str, chars: int) -> str:
    """`text` repeated to exactly `chars` characters."""
    return (text * (chars // len(text) + 1))[:chars]
